"""The examples of the README and the docs/ pages run as written, against one real master
and agent (cgroup v1); the pages are read in testkit.readme_examples.user_pages's order.

Each ```sh block (and each untagged block's command lines) runs as one bash script, in a
fresh project directory holding what the README presumes the user has: the scripts it names
(`./prep.sh`, `sweep.py` ...: stubs that exit 0), the README's own job file as `job.yaml`,
`examples/` (a link to the repository's), and `.venv/bin/tcl`. `tcl` there is the real one,
which remembers each job it submitted so that the README's `ID` and `JOB` stand for the
last one. Every command must exit 0; then each submitted job must end as the README says
(SUCCEEDED, unless EXPECTED_STATES says otherwise) and `tcl logs` of the first prints 42.

What cannot run here is listed below with why; tests/unit/test_readme_examples.py still
parses every one of them with the real parser.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, OneNodeCluster, cgroup_v1_usable, tcl, wait_job
from testkit.readme_examples import invocations_in, logical_lines, sh_blocks, user_pages

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
REPO = Path(__file__).resolve().parents[2]
PAGES = dict(user_pages(REPO))

# Blocks skipped whole (a line of the block matches): they need what one node here lacks.
SKIPPED_BLOCKS = {
    r"tcl node cordon": "names the example's nodes n1..n3; `drain --monitor` waits for a drain",
    r"--network bridge": "the task network: tcl-agent --net (netns, veths) and iperf3 on the node",
    r"TCL_FEDERATION": "a federation: tcl-gm global managers over several masters",
    r"tcl-agent --master m:7071 --gpus": "GPUs",
    r"--gpus 2 -- python3 train.py": "GPUs, and the queues ml and etl of the GPU section's queue file",
    r"^\s*for i in 1 2 3": "starts three etcd members",
    r"tcl exec JOB -- ps aux": "a terminal (-it) and a task of the reader's still running: tests/e2e/test_exec.py "
                               "runs tcl exec and tcl run, -it through a pty, through the binaries",
    r"tcl hold \$ID; tcl update": "the reader's own jobs ($ID, $A, $B): tests/e2e/test_lifecycle.py runs each verb "
                                  "through the binaries",
}
# Lines not run inside a block that runs (fullmatch on a command's words, `.venv/bin/` dropped);
# lines without a tcl command (dpkg, systemctl, export TCL_MASTER=...) are not run either.
CANNOT_RUN = {
    r"tcl-master .*": "starts or sets up a master: the cluster here is the test's own",
    r"tcl-agent .*": "starts or joins an agent: the cluster here is the test's own",
    r"tcl-gm .*": "a federation's global manager and its etcd (docs/federation-*.md): tests/component, "
                  "tests/ha and tests/system run tcl-gm",
    r"tcl login --master master\.example:7070": "the example's master host",
    r"tcl submit --queue ads\.prod .*": "queue ads.prod is the example's (tcl-master user add ... --queues 'ads.*')",
    r"tcl top( --sort memory)?": "redraws until Ctrl-C (`tcl top -o json` runs)",
    r"tcl sim examples/(preemption-departments|backfill-gangs|lotes-generated|megha-federation)\.yaml.*":
        "minutes of simulation on 2 cores (the cheap `tcl sim` examples run)",
    r"tcl pack --generate 1000 .*": "minutes on 2 cores (tests/unit covers tcl pack)",
}
# Lines not run, found by what they say (their comment included).
CANNOT_RUN_LINES = {
    r"tcl logs ID +# hello from the image": "the image's output: needs a node with docker (tcluster.io/docker)",
}
# How a job submitted by the line that starts so ends up, when not SUCCEEDED.
EXPECTED_STATES = {
    "tcl submit --name burner": {"RUNNING"},           # `while True: pass` until the test cancels it
    "tcl submit --image busybox": {"PENDING"},         # "no node with docker yet: PENDING" (README)
    "tcl submit --cpu 0.5 -- sleep 60": {"RUNNING", "SUCCEEDED"},   # the HA section's: a minute's sleep
    "tcl submit --array 0-999%50": None,               # 1,000 tasks: cancelled after its block, not waited for
}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
STUBS = ("run.sh", "job.sh", "flaky.sh", "prep.sh", "train.sh", "report.sh", "long.sh", "transform.sh", "work.sh")
TCL_WRAPPER = """#!/bin/sh
# The README's tcl: the real one; a submit's id is remembered (for ID and JOB) with the line that made it.
if [ "$1" = submit ]; then
  id=$("$REAL_TCL" "$@") || exit $?
  echo "$id"; echo "$id" > "$LAST_ID"; echo "$README_LINE $id" >> "$SUBMITTED"
  exit 0
fi
exec "$REAL_TCL" "$@"
"""


def reason_not_run(text: str) -> str | None:
    """Why the README line `text` is not run here, or None."""
    invocations = invocations_in(0, text)
    for pattern, why in CANNOT_RUN_LINES.items():
        if re.search(pattern, text.replace(".venv/bin/tcl", "tcl")):
            return why
    if not invocations:
        return "not a tcl command"
    if any(inv.synopsis for inv in invocations):
        return "a synopsis"
    for inv in invocations:
        for pattern, why in CANNOT_RUN.items():
            if re.fullmatch(pattern, " ".join(inv.argv)):
                return why
    return None


def runnable_blocks() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """('PAGE:LINE' of the block, its runnable lines as ('PAGE:LINE', text)), page by page."""
    for page, text in PAGES.items():
        for start, lines in sh_blocks(text):
            if any(re.search(pattern, line) for pattern in SKIPPED_BLOCKS for line in lines):
                continue
            logical = [(f"{page}:{n}", line) for n, line in logical_lines(start, lines) if reason_not_run(line) is None]
            if logical:
                yield f"{page}:{start}", logical


def script_of(lines: list[tuple[str, str]]) -> str:
    """The block's runnable lines, with ID and JOB standing for the last job submitted."""
    body = ["set -e"]
    for number, text in lines:
        text = re.sub(r"(?<![\w$])(ID|JOB)(?!\w)", '"$(cat "$LAST_ID")"', text)
        body += [f"export README_LINE={number}", text]
    return "\n".join(body) + "\n"


@pytest.fixture
def home() -> Iterator[Path]:
    """The project directory: outside /tmp (a task's /tmp is its own, so the host's is not
    where it could run from), the reader's own as their home is: owned by the user the
    tasks run as (the agent's default, nobody), so that output files can be written there."""
    path = Path(tempfile.mkdtemp(prefix="tcl-readme-", dir="/var/tmp"))
    path.chmod(0o755)
    os.chown(path, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def project(home: Path) -> Path:
    """A directory as the README's reader has it: their scripts, a job file, the checkout's examples/."""
    (home / ".venv" / "bin").mkdir(parents=True)
    for name in STUBS:
        (home / name).write_text("#!/bin/sh\nexit 0\n")
        (home / name).chmod(0o755)
    for name in ("sweep.py", "train.py", "job.py"):
        (home / name).write_text("print('ok')\n")
    job_file = re.search(r"A job file:\n\n```yaml\n(.*?)```", "\n".join(PAGES.values()), re.S)
    assert job_file, "the docs' job file example (docs/using-tcl.md)"
    (home / "job.yaml").write_text(job_file.group(1))
    (home / "examples").symlink_to(REPO / "examples")
    wrapper = home / ".venv" / "bin" / "tcl"
    wrapper.write_text(TCL_WRAPPER)
    wrapper.chmod(0o755)
    return home


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneNodeCluster]:
    # room for the README's gang of 4 tasks x 8 cores in one round (declared: weights, not cores)
    one = OneNodeCluster(tmp_path_factory.mktemp("readme"), "readme", [], "--cpus", "40", "--memory", "16Gi")
    try:
        yield one
    finally:
        one.stop()


def test_the_readme_examples_run_as_written(cluster: OneNodeCluster, home: Path, tmp_path: Path) -> None:
    project(home)
    env = {**os.environ, "TCL_MASTER": cluster.address, "REAL_TCL": str(BIN / "tcl"),
           "LAST_ID": str(tmp_path / "last-id"), "SUBMITTED": str(tmp_path / "submitted"),
           "PATH": f"{home / '.venv' / 'bin'}:{os.environ['PATH']}"}
    with_files = submit_dir_is_the_workdir()
    ran, waiting = 0, []
    for start, lines in runnable_blocks():
        if not with_files and any(needs_the_submit_dir(text) for _, text in lines):
            waiting.append(start)
            continue
        done = subprocess.run(["bash", "-c", script_of(lines)], cwd=home, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"the block at {start}:\n{script_of(lines)}\n{done.stdout}\n{done.stderr}"
        ran += len(lines)
        for line in (tmp_path / "submitted").read_text().splitlines():
            where, job_id = line.split()
            if any(source(where).startswith(p) for p, states in EXPECTED_STATES.items() if states is None):
                tcl(cluster.address, "cancel", job_id, check=False)     # not waited for
    assert ran >= 15, f"only {ran} lines of the pages ran"
    check_outcomes(cluster.address, (tmp_path / "submitted").read_text().splitlines())
    if waiting:
        pytest.skip(f"the blocks at {waiting} run files of the submit directory (./prep.sh, "
                    "sweep.py), which is not yet the tasks' default working directory (issue 34, with --export)")


def source(where: str) -> str:
    """The line at 'PAGE:LINE', `.venv/bin/` dropped."""
    page, _, number = where.rpartition(":")
    return PAGES[page].split("\n")[int(number) - 1].replace(".venv/bin/tcl", "tcl").strip()


def needs_the_submit_dir(text: str) -> bool:
    """Runs a file of the project directory (`./prep.sh`, `python3 sweep.py`, `-f job.yaml`)."""
    return bool(re.search(r"\./\w|\w\.py\b|-f job\.yaml", text))


def submit_dir_is_the_workdir() -> bool:
    """Issue 34 makes the submit directory a task's default working directory, with --export
    (the env branch); until that is merged, jobs that run a project file fail where they start."""
    help_text = subprocess.run([str(BIN / "tcl"), "submit", "--help"], capture_output=True, text=True).stdout
    return "--export" in help_text


def check_outcomes(master: str, submitted: list[str]) -> None:
    first = submitted[0].split()[1]
    assert wait_job(master, first, TERMINAL)["state"] == "SUCCEEDED"
    assert tcl(master, "logs", first).stdout == "42\n"          # README: `tcl logs ID   # 42`
    for line in submitted:
        where, job_id = line.split()
        text = source(where)
        expected = next((states for prefix, states in EXPECTED_STATES.items() if text.startswith(prefix)),
                        {"SUCCEEDED"})
        if expected is not None:
            job = wait_job(master, job_id, expected | TERMINAL, timeout_s=120)
            assert job["state"] in expected, f"{where}: {text}\n{job}"
