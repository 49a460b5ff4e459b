"""Issue 34, as a Slurm user would: `cd project && tcl submit -- ./run.sh` runs there as the
task's user with the shell's variables, `--mem 4096` is 4 GiB and `--time-limit 90` 90
minutes, and a working directory the node lacks fails naming it, across a master restart.
Through the real binaries on cgroup v1; one cluster for every check."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, OneNodeCluster, cgroup_v1_usable, gate_dir, gated, tcl, tcl_json, wait_job

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
RUN_SH = """#!/bin/sh
echo "in $(pwd) as $(id -un) MYVAR=$MYVAR SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-unset}"
echo made > made-by-task.txt
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneNodeCluster]:
    c = OneNodeCluster(tmp_path_factory.mktemp("env"), "env", ["--heartbeat-interval-s", "0.5"],
                       "--cpus", "2", "--memory", "8Gi")
    try:
        yield c
    finally:
        c.stop()


def fresh_dir() -> Path:
    """A new project directory outside /tmp (the task's /tmp is private), open to nobody."""
    path = Path(tempfile.mkdtemp(prefix="tcl-e2e-proj-", dir="/var/tmp"))
    path.chmod(0o777)
    (path / "run.sh").write_text(RUN_SH)
    (path / "run.sh").chmod(0o755)
    return path


@pytest.fixture
def project() -> Iterator[Path]:
    path = fresh_dir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def submit_from(cluster: OneNodeCluster, where: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`tcl submit` run in `where` by a shell with `env` on top of ours, as a user types it."""
    done = subprocess.run([str(BIN / "tcl"), "--master", cluster.address, "submit", *args], cwd=where,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PWD": str(where), **env})
    assert done.returncode == 0, done.stderr
    return done


def test_a_script_in_the_submit_directory_runs_there_with_slurms_units(cluster: OneNodeCluster,
                                                                       project: Path) -> None:
    done = submit_from(cluster, project, "--mem", "4096", "--time-limit", "90", "--", "./run.sh",
                       MYVAR="from-shell", SSH_AUTH_SOCK="/run/agent.sock")
    job_id = done.stdout.strip()
    assert f"{job_id}: 1 task × cpu 1, memory 4Gi, time limit 1h30m, in {project}" in done.stderr
    job = wait_job(cluster.address, job_id, DONE)
    log = tcl(cluster.address, "logs", job_id).stdout
    assert job["state"] == "SUCCEEDED", (job, log)
    assert log.strip() == f"in {project} as nobody MYVAR=from-shell SSH_AUTH_SOCK=unset"
    made = project / "made-by-task.txt"
    assert made.read_text() == "made\n" and made.stat().st_uid == 65534          # written as the task's user
    assert job["resources"]["memory"] == 4 * 2**30 and job["time_limit_s"] == 5400
    assert job["submit_dir"] == str(project) and job["env"]["MYVAR"] == "from-shell"
    assert "SSH_AUTH_SOCK" not in job["env"]
    status = tcl(cluster.address, "status", job_id).stdout
    assert re.search(rf"^Directory:\s+{re.escape(str(project))}$", status, re.M), status
    assert re.search(r"^Time limit:\s+1h30m$", status, re.M) and "memory=4Gi per task" in status, status


def test_export_none_and_a_list_pass_only_what_they_name(cluster: OneNodeCluster, project: Path) -> None:
    none = submit_from(cluster, project, "--export", "NONE", "--", "./run.sh", MYVAR="x").stdout.strip()
    listed = submit_from(cluster, project, "--export", "MYVAR,OTHER=2", "--", "sh", "-c",
                         'echo "$MYVAR $OTHER ${PATH}"', MYVAR="y").stdout.strip()
    for job_id in (none, listed):
        assert wait_job(cluster.address, job_id, DONE)["state"] == "SUCCEEDED"
    assert "MYVAR= " in tcl(cluster.address, "logs", none).stdout
    assert tcl(cluster.address, "logs", listed).stdout.strip() == \
        "y 2 /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"      # the node's PATH, not ours


def test_bad_units_are_refused_before_anything_is_sent(cluster: OneNodeCluster, project: Path) -> None:
    for args, said in ((["--mem", "0"], "unlimited"), (["--mem", "0.5"], "4 MiB"),
                       (["--time-limit", "5x"], "minutes")):
        done = subprocess.run([str(BIN / "tcl"), "--master", cluster.address, "submit", *args, "--", "true"],
                              cwd=project, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_a_working_directory_the_node_lacks_fails_naming_it_across_a_master_restart(cluster: OneNodeCluster,
                                                                                     project: Path) -> None:
    gone = fresh_dir()
    with gate_dir() as gates:
        first = tcl(cluster.address, "submit", "--mem", "16M", "--", *gated(gates / "go", "true")).stdout.strip()
        stays = submit_from(cluster, project, "--after-ok", first, "--", "./run.sh").stdout.strip()
        lost = submit_from(cluster, gone, "--after-ok", first, "--", "./run.sh").stdout.strip()
        missing = tcl(cluster.address, "submit", "--workdir", "/nonexistent/tcl-e2e", "--", "true").stdout.strip()
        shutil.rmtree(gone)                 # exists where tcl ran, not on the node by the time it starts
        cluster.restart_master()            # the submit directory is part of the stored spec
        (gates / "go").touch()
        jobs = {job_id: wait_job(cluster.address, job_id, DONE) for job_id in (stays, lost, missing)}
    assert jobs[stays]["state"] == "SUCCEEDED" and (project / "made-by-task.txt").exists()
    assert jobs[stays]["submit_dir"] == str(project)
    reason = jobs[lost]["tasks"][0]["reason"]
    assert jobs[lost]["state"] == "FAILED" and f"working directory {gone} (the directory tcl submit ran in) " \
        "does not exist on this node; give --workdir" in reason, reason
    reason = jobs[missing]["tasks"][0]["reason"]
    assert "working directory /nonexistent/tcl-e2e (--workdir) does not exist" in reason, reason


def test_a_command_missing_from_the_working_directory_says_where_it_looked(cluster: OneNodeCluster,
                                                                           project: Path) -> None:
    job_id = submit_from(cluster, project, "--", "./nosuch.sh").stdout.strip()
    reason = wait_job(cluster.address, job_id, DONE)["tasks"][0]["reason"]
    assert f"exec failed: No such file or directory: './nosuch.sh' not found in the task's working directory " \
        f"{project}; the task's /tmp is private" in reason, reason
