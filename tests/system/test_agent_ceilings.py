"""Node limits are ceilings, through the real daemons (tcl-master, tcl-agent, real
cgroups): the review's attack (`--log-max 1Ti --pids-max 4000000` on a node with
`--log-max 4Mi --pids-max 64`) is refused at submit naming the limit; a job may lower the
node's value; a job goes only to a node whose ceilings allow its ask, and waits saying why
while only a node that is down would."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

from testkit.cgroups import SKIP_REASON, group_dirs
from testkit.procs import sweep_node
from testkit.procs import start_agent, tcl
from tests.system.cluster import cluster, job, node_name, submit, task_key, wait_state

pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
MI = 2**20
SMALL = ("--log-max", "4Mi", "--pids-max", "64", "--labels", "size=small")


def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def pids_max(node: str, key: str) -> str:
    """The task's pids.max (v1: under the pids hierarchy; v2: the one group)."""
    return next(d / "pids.max" for d in group_dirs(node, key) if (d / "pids.max").exists()).read_text().strip()


def test_a_job_cannot_lift_the_agents_limits(tmp_path: Path) -> None:
    with cluster(tmp_path, "ceil", *SMALL) as (master, node, _):
        refused = tcl(master, "submit", "--log-max", "1Ti", "--pids-max", "4000000", "--", "true", check=False)
        assert refused.returncode == 1, refused      # the master refused it (INVALID_ARGUMENT)
        assert ("pids_max: 4000000 is above every node's ceiling (largest: 64, tcl-agent --pids-max)"
                in refused.stderr), refused.stderr
        refused = tcl(master, "submit", "--log-max", "1Ti", "--", "true", check=False)
        assert f"log_max_bytes: {2**40} is above every node's ceiling (largest: {4 * MI}, tcl-agent --log-max)" \
            in refused.stderr, refused.stderr
        job_id = submit(master, "--pids-max", "32", "--", "sleep", "60")    # lowering is allowed
        key = task_key(wait_state(master, job_id, {"RUNNING"}))
        assert pids_max(node, key) == "32"
        tcl(master, "cancel", job_id)
        wait_state(master, job_id, {"CANCELLED"})


def test_a_job_goes_only_to_a_node_whose_ceiling_allows_it(tmp_path: Path) -> None:
    big = node_name("ceilbig")
    with cluster(tmp_path, "ceilsmall", *SMALL) as (master, node, agents):
        try:
            agents.append(start_agent(tmp_path, master, big, "--pids-max", "4096", "--log-max", "64Mi"))
            write = f"head -c {6 * MI} /dev/zero; sleep 60"
            job_id = submit(master, "--pids-max", "1000", "--log-max", "16Mi", "--", "sh", "-c", write)
            found = wait_state(master, job_id, {"RUNNING"})
            key = task_key(found)
            assert found["tasks"][0]["node"] == big             # the small node's 64 is below the ask
            assert pids_max(big, key) == "1000"
            logs = tmp_path / big / "logs" / key
            wait_for(lambda: (logs / "stdout").exists() and (logs / "stdout").stat().st_size == 6 * MI)
            assert not (logs / "stdout.1").exists()              # 6Mi < the job's 16Mi: no rotation
            tcl(master, "cancel", job_id)
            wait_state(master, job_id, {"CANCELLED"})
            agents.pop().stop()                                  # only a node that is down would allow it now
            waiting = submit(master, "--pids-max", "1000", "--", "true")
            wait_for(lambda: "no ready node allows pids_max 1000" in job(master, waiting)["pending_reason"])
            assert job(master, waiting)["pending_reason"] == \
                "no ready node allows pids_max 1000 (the largest ready allows 64, tcl-agent --pids-max)"
            tcl(master, "cancel", waiting)
        finally:
            if len(agents) > 1:
                agents.pop().stop()
            sweep_node(big, tmp_path / big)
