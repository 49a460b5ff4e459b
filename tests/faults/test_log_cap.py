"""Scenario 8: a task floods stdout; the log is capped and rotated."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from testkit.faultcluster import Cluster

pytestmark = pytest.mark.system
MiB = 2**20
FLOOD = 500 * MiB
SLACK = 64 * 1024          # "about 1 MiB": a rotation may overshoot by one write
LINE = "0123456789abcdefghijklmnopqrstuvwxyz" * 3


def _log_files(state_dir: Path, task_id: str) -> dict[str, int]:
    """name -> size of every stdout* file the node keeps for the task, all attempts."""
    root = state_dir / "logs"
    files: dict[str, int] = {}
    for attempt_dir in root.glob(f"{task_id}.*"):
        for path in attempt_dir.glob("stdout*"):
            files[f"{attempt_dir.name}/{path.name}"] = path.stat().st_size
    return files


def test_a_flood_of_stdout_is_capped_and_rotated(cluster: Cluster) -> None:
    """Proves: with --log-max 1Mi, a task writing 500 MiB to stdout still succeeds, `tcl
    logs` returns at most about 1 MiB that ends with the last line the task wrote, and the
    node keeps only `stdout` and `stdout.1`, each at most about 1 MiB."""
    cluster.start_master()
    a = cluster.start_agent("logs")
    marker = f"LAST-LINE-{uuid.uuid4().hex}"
    script = f"yes {LINE} | head -c {FLOOD}; echo; echo {marker}"
    job_id = cluster.submit("sh", "-c", script, log_max="1Mi", mem="256Mi")
    try:
        job = cluster.wait_job(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=150)
        assert job["state"] == "SUCCEEDED", job
        out = cluster.tcl("logs", job_id, timeout_s=60).stdout
        files = _log_files(a.state_dir, job["tasks"][0]["id"])
    finally:
        shutil.rmtree(a.state_dir / "logs", ignore_errors=True)   # never leave 500 MiB behind
    size, tail = len(out.encode()), out[-200:]
    del out   # keep pytest's assertion messages short
    assert tail.endswith(f"\n{marker}\n"), tail
    assert size <= MiB + SLACK, f"tcl logs returned {size} bytes"
    names = {name.rpartition("/")[2] for name in files}
    assert names <= {"stdout", "stdout.1"} and "stdout" in names, files
    assert all(size <= MiB + SLACK for size in files.values()), files
