"""Job scripts and output files through the real binaries (README, "Scripts and output
files"): `tcl submit run.sh` with #TCL and #SBATCH lines runs with their resources and
writes `out-%j-%t.txt` in its working directory; a file that cannot be opened fails the
task naming it; an agent restart while a task writes its file neither loses nor repeats a
line. One cluster for all: each check is a job of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, OneNodeCluster, Proc, cgroup_v1_usable, tcl, tcl_json, wait_job

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneNodeCluster]:
    c = OneNodeCluster(tmp_path_factory.mktemp("scripts"), "scripts", ["--heartbeat-interval-s", "0.5"],
                       "--cpus", "2", "--memory", "2Gi")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Outside /tmp (a task's /tmp is its own), writable by the agent's default user."""
    path = Path("/var/tmp") / f"tcl-e2e-scripts-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


SCRIPT = """#!/bin/sh
# a comment between directives is fine
#TCL --cpu 0.5 --mem 64Mi --array 0-1
#SBATCH -J scripted --time=5 -o out-%j-%t.txt
#SBATCH -e err-%x-%a.txt
echo "task $TCL_TASK_INDEX of $0 args $*"
echo "oops $TCL_TASK_INDEX" >&2
#SBATCH --nodes 9
"""


def test_a_script_runs_with_its_directives_and_writes_its_output_files(cluster: OneNodeCluster,
                                                                       workdir: Path) -> None:
    script = workdir / "run.sh"
    script.write_text(SCRIPT)
    # The command line wins over the script's #TCL --mem; the script's arguments follow it.
    job_id = tcl(cluster.address, "submit", "--mem", "48Mi", "--workdir", str(workdir), str(script), "a1").stdout.strip()
    job = wait_job(cluster.address, job_id, DONE, timeout_s=90)
    assert job["state"] == "SUCCEEDED", job
    assert (job["name"], job["array"], job["time_limit_s"]) == ("scripted", "0-1", 300.0)
    assert job["resources"]["cpu"] == 0.5 and job["resources"]["memory"] == 48 << 20
    assert job["script"] == SCRIPT and job["command"] == [str(script), "a1"]
    for index in (0, 1):
        assert (workdir / f"out-{job_id}-{index}.txt").read_text() == f"task {index} of /proc/self/fd/63 args a1\n"
        assert (workdir / f"err-scripted-{index}.txt").read_text() == f"oops {index}\n"
    # tcl logs reads the user's file (the agent wrote none of its own).
    assert tcl(cluster.address, "logs", job_id, "--task", "1").stdout == "task 1 of /proc/self/fd/63 args a1\n"
    assert tcl(cluster.address, "logs", job_id, "--stderr").stdout == "oops 0\n"


def test_a_refused_directive_names_its_flag_and_line(cluster: OneNodeCluster, workdir: Path) -> None:
    script = workdir / "bad.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mail-type=END\ntrue\n")
    result = tcl(cluster.address, "submit", str(script), check=False)
    assert result.returncode == 2
    assert "line 2" in result.stderr and "--mail-type" in result.stderr


def test_an_output_file_that_cannot_be_opened_fails_the_task_naming_it(cluster: OneNodeCluster,
                                                                        workdir: Path) -> None:
    job_id = tcl(cluster.address, "submit", "--mem", "16Mi", "--workdir", str(workdir), "--stdout-file",
                 "missing-dir/out-%j.txt", "--", "true").stdout.strip()
    job = wait_job(cluster.address, job_id, DONE, timeout_s=60)
    assert job["state"] == "FAILED"
    reason = job["tasks"][0]["reason"]
    assert f"missing-dir/out-{job_id}.txt" in reason and str(workdir) in reason, reason


def test_an_agent_restart_while_a_task_writes_neither_loses_nor_repeats_output(cluster: OneNodeCluster,
                                                                              workdir: Path) -> None:
    # -o alone: stderr follows stdout into the same file (sbatch's default).
    job_id = tcl(cluster.address, "submit", "--mem", "16Mi", "--workdir", str(workdir), "--stdout-file", "log-%j.txt",
                 "--", "sh", "-c", "for i in $(seq 1 40); do echo out $i; echo err $i >&2; sleep 0.1; done").stdout.strip()
    wait_job(cluster.address, job_id, {"RUNNING"} | DONE, timeout_s=60)
    log = workdir / f"log-{job_id}.txt"
    cluster.agent.stop(signal.SIGTERM)         # tasks outlive their agent by design
    assert log.exists()
    args = [str(BIN / "tcl-agent"), "--master", cluster.address, "--node", cluster.node, "--runtime", "cgroup1",
            "--cpus", "2", "--memory", "2Gi", "--state-dir", str(cluster.tmp / "agent")]
    cluster.agent = Proc(args, cluster.tmp / "agent2.log")
    cluster.agent.wait_for_output(r"registered with")
    job = wait_job(cluster.address, job_id, DONE, timeout_s=90)
    assert job["state"] == "SUCCEEDED", job
    expected = [line for i in range(1, 41) for line in (f"out {i}", f"err {i}")]
    assert log.read_text().splitlines() == expected
    assert tcl_json(cluster.address, "status", job_id)["tasks"][0]["attempt"] == 1   # type: ignore[index]


def test_a_retry_appends_to_the_file_its_first_attempt_wrote(cluster: OneNodeCluster, workdir: Path) -> None:
    job_id = tcl(cluster.address, "submit", "--mem", "16Mi", "--workdir", str(workdir), "--retries", "1",
                 "--stdout-file", "retry-%j-%t.txt", "--", "sh", "-c",
                 'echo "attempt $TCL_ATTEMPT"; test "$TCL_ATTEMPT" -ge 2').stdout.strip()
    job = wait_job(cluster.address, job_id, DONE, timeout_s=90)
    assert job["state"] == "SUCCEEDED", job
    assert (workdir / f"retry-{job_id}-0.txt").read_text() == "attempt 1\nattempt 2\n"


def test_a_script_at_the_size_bound_runs_and_one_past_it_is_refused(cluster: OneNodeCluster, workdir: Path) -> None:
    from tcluster.domain.scripts import MAX_SCRIPT_BYTES
    head = "#!/bin/sh\n#TCL --mem 16Mi\necho big\n"
    filler = "# " + "x" * 98 + "\n"                        # comments after the first command: 100 bytes a line
    big = head + filler * ((MAX_SCRIPT_BYTES - len(head)) // len(filler))
    script = workdir / "big.sh"
    script.write_text(big)
    job_id = tcl(cluster.address, "submit", "--workdir", str(workdir), "-o", "json", str(script)).stdout
    job = wait_job(cluster.address, json.loads(job_id)["id"], DONE, timeout_s=90)
    assert job["state"] == "SUCCEEDED" and len(job["script"]) == len(big) > MAX_SCRIPT_BYTES - 100, job["state"]
    script.write_text(big + filler)
    refused = tcl(cluster.address, "submit", str(script), check=False)
    assert refused.returncode == 2 and "larger than 512 KiB" in refused.stderr
