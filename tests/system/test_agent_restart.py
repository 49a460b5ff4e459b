"""Tasks outlive their agent: SIGKILL the agent while tasks run, check they kept running,
let one end while no agent is there, restart the agent, and read both exits through the
master (`tcl status`)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from testkit.cgroups import SKIP_REASON, leftovers
from tests.system.cluster import cluster, submit, task_key, task_pids, wait_state
from testkit.patience import patient
from testkit.procs import gated, start_agent, tcl_quick as tcl

pytestmark = [pytest.mark.system, pytest.mark.guest, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


def test_tasks_survive_an_agent_sigkill_and_are_re_adopted(tmp_path: Path, gates: Path) -> None:
    with cluster(tmp_path, "restart", "--cpus", "2", "--memory", "1Gi") as (master, node, agents):
        quick = submit(master, "--cpu", "0.5", "--mem", "64Mi", "--", *gated(gates / "quick", "echo early; exit 3"))
        slow = submit(master, "--cpu", "0.5", "--mem", "64Mi", "--", *gated(gates / "slow", "echo late"))
        keys = {j: task_key(wait_state(master, j, {"RUNNING"})) for j in (quick, slow)}
        pids = {j: task_pids(node, k) for j, k in keys.items()}
        assert all(pids.values()), pids

        agents[0].stop(signal.SIGKILL)
        # The gate loops fork short sleeps, so look at the containers, not at single pids.
        assert all(task_pids(node, k) for k in keys.values()), "tasks died with their agent"
        # The quick task ends while no agent runs: its shim records the exit on its own.
        (gates / "quick").touch()
        exit_record = tmp_path / node / "containers" / keys[quick] / "exit.json"
        deadline = time.monotonic() + patient(60)
        while not exit_record.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exit_record.exists(), "the shim did not record the exit while the agent was away"
        assert task_pids(node, keys[slow]), "the slow task died while the agent was away"

        agents[0] = start_agent(tmp_path, master, node, "--cpus", "2", "--memory", "1Gi", log="agent2.log")
        ended = wait_state(master, quick, DONE)
        task = ended["tasks"][0]
        assert (ended["state"], task["exit_code"], task["reason"]) == ("FAILED", 3, "exited with code 3"), ended
        assert task["attempt"] == 1            # the same attempt: nothing was rescheduled
        assert tcl(master, "logs", quick).stdout == "early\n"
        assert wait_state(master, slow, {"RUNNING"})["tasks"][0]["attempt"] == 1   # re-adopted, still running
        (gates / "slow").touch()
        finished = wait_state(master, slow, DONE)
        assert finished["state"] == "SUCCEEDED" and finished["tasks"][0]["attempt"] == 1, finished
        assert tcl(master, "logs", slow).stdout == "late\n"
        assert "re-adopted running task" in agents[0].output()
    assert leftovers(node) == []
