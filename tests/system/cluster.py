"""A real master and agents (the installed binaries) on 127.0.0.1 for the system tests
that go through `tcl`, on whatever cgroup backend this host offers. `tcl` itself runs in
the test's process (testkit/inproc.py): the subject here is the agent and its cgroups."""

from __future__ import annotations

import json
import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from testkit.procs import Proc, job_reached, polled_status, start_agent, start_master, tcl_quick, tcl_quick_json
from testkit.cgroups import group_dirs, leftovers
from testkit.procs import sweep_node
from testkit.patience import patient

HEARTBEAT_S = 0.5


def node_name(tag: str) -> str:
    return f"sys-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@contextmanager
def cluster(tmp: Path, tag: str, *agent_args: str) -> Iterator[tuple[str, str, list[Proc]]]:
    """(master address, node, [agent]) with everything stopped and checked clean after.
    Stopped agents leave their tasks running (by design), so whatever is left is swept
    away even when the test failed; a test that passed must have left nothing."""
    master, address = start_master(tmp, heartbeat_s=HEARTBEAT_S)
    node = node_name(tag)
    agents: list[Proc] = []
    passed = False
    try:
        agents.append(start_agent(tmp, address, node, *agent_args))
        yield address, node, agents
        passed = True
    finally:
        for agent in agents:
            agent.stop()
        master.stop()
        leaked = leftovers(node)
        sweep_node(node, tmp / node)
    assert not passed or leaked == [], f"the test left cgroups behind: {leaked}"


def submit(master: str, *args: str) -> str:
    return tcl_quick(master, "submit", *args).stdout.strip()


def job(master: str, job_id: str) -> dict:
    found = tcl_quick_json(master, "status", job_id)
    assert isinstance(found, dict)
    return found


def wait_state(master: str, job_id: str, states: set[str], timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + patient(timeout_s)
    found = None
    while time.monotonic() <= deadline:
        found = polled_status(master, job_id)       # None: one poll answered late; poll on
        if found is not None and job_reached(found, states):
            return found
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not in {states} in time (None: the master answered late): {found}")


def task_key(found: dict, index: int = 0) -> str:
    task = found["tasks"][index]
    return f"{task['id']}.{task['attempt']}"


def task_pids(node: str, key: str) -> list[int]:
    try:
        return [int(p) for p in (group_dirs(node, key)[0] / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def proc_cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes from /proc/<pid>/stat, the cross-check's source."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def nodes(master: str) -> list[dict]:
    return json.loads(tcl_quick(master, "nodes", "-o", "json").stdout)
