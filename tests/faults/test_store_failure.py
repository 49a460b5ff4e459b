"""Scenario 7: the master's store cannot be written (a full disk, a read-only disk)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from testkit.faultcluster import Cluster, wait_for
from tests.faults.disk import SmallDisk

# SQLite only: these scenarios fill or remount the filesystem under the master's data dir,
# which is where SQLite keeps the state. With --store etcd the state is in etcd, not on
# that disk; its counterpart (the store unreachable: etcd without quorum) is in
# tests/ha/test_etcd_quorum.py.
pytestmark = [pytest.mark.system, pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)]
BIG_WORD = "x" * 100_000        # < MAX_ARG_STRLEN (128 KiB): one argv word of `tcl submit`
MAX_TRIES = 60                  # submits of ~300 KB each: a 16 MiB disk refuses long before


def _big_submit(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """A job whose spec is ~300 KB, so its write needs fresh space on the disk (it waits:
    it asks for all of the node's cpus)."""
    return cluster.tcl("submit", "--cpu", "2", "--mem", "64Mi", "--", "true", BIG_WORD, BIG_WORD, BIG_WORD, check=False)


def _assert_refused(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr[-500:])
    assert "cannot write" in result.stderr, result.stderr[-500:]
    assert len(result.stderr) < 2000, "the error must be a short message, not an echo of the request"


def _reads_work(cluster: Cluster, job_id: str) -> None:
    """status, jobs and nodes answer (jobs with a limit: a list of ~300 kB specs is big)."""
    assert cluster.status(job_id)["id"] == job_id
    assert isinstance(cluster.tcl_json("jobs", "--limit", "3"), list)
    assert isinstance(cluster.tcl_json("nodes"), list)


def _submit_until_refused(cluster: Cluster) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """Big submits until one is refused; returns the ids of those accepted first."""
    accepted = []
    for _ in range(MAX_TRIES):
        result = _big_submit(cluster)
        if result.returncode != 0:
            return accepted, result
        accepted.append(result.stdout.strip())
    raise AssertionError(f"{MAX_TRIES} submits of ~300 KB all accepted on a full 16 MiB disk")


def test_full_disk_refuses_new_work_keeps_reads_and_recovers(cluster: Cluster, small_disk: SmallDisk) -> None:
    """Proves: when the data dir's filesystem is full, Submit fails with exit code 1 and a
    short "cannot write" message (never a crash), reads keep working, every submit that was
    acknowledged before is still there, an agent keeps being served, and once space is back
    submits succeed again without restarting the master."""
    cluster.start_master(data_dir=small_disk.data_dir)
    a = cluster.start_agent("disk")
    running = cluster.submit("sleep", "300", cpu="2")
    cluster.wait_task(running, lambda t: t["state"] == "RUNNING", "RUNNING")
    small_disk.fill()
    accepted, refused = _submit_until_refused(cluster)
    _assert_refused(refused)
    _reads_work(cluster, running)
    for job_id in accepted:
        assert cluster.status(job_id)["id"] == job_id
    cancel = cluster.tcl("cancel", running, check=False)
    if cancel.returncode != 0:
        _assert_refused(cancel)
    assert cluster.master is not None and cluster.master.popen.poll() is None, "the master died"
    assert cluster.nodes()[a.name]["state"] == "READY"
    small_disk.unfill()
    job_id = wait_for(lambda: (r := _big_submit(cluster)).returncode == 0 and r.stdout.strip(), 10,
                      "a submit accepted once the disk has space again")
    assert cluster.status(job_id)["id"] == job_id
    cluster.tcl("cancel", running, check=cancel.returncode != 0)   # once is enough if the first landed
    assert cluster.wait_job(running, {"CANCELLED"})["state"] == "CANCELLED"


def test_readonly_disk_refuses_new_work_keeps_reads_and_recovers(cluster: Cluster, small_disk: SmallDisk) -> None:
    """Proves: a master whose data dir is read-only serves reads of what it has and refuses
    Submit and Cancel with exit code 1 and "cannot write"; once the disk is writable again,
    submits succeed without restarting the master.

    The kernel refuses `remount,ro` while a process holds a file open for writing (a running
    master's database), so the disk becomes read-only between a clean master stop and its
    restart, as after a filesystem error remounted it read-only."""
    cluster.start_master(data_dir=small_disk.data_dir)
    kept = cluster.submit("true")
    cluster.kill_master(signal.SIGTERM)
    small_disk.readonly()
    cluster.start_master()
    _reads_work(cluster, kept)
    _assert_refused(cluster.tcl("submit", "--", "true", check=False))
    _assert_refused(cluster.tcl("cancel", kept, check=False))
    small_disk.writable()
    job_id = wait_for(lambda: (r := cluster.tcl("submit", "--", "true", check=False)).returncode == 0
                      and r.stdout.strip(), 10, "a submit accepted once the disk is writable again")
    assert cluster.status(job_id)["id"] == job_id
    assert cluster.status(kept)["id"] == kept
