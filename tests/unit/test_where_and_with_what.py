"""Issue 34, where and with what a task runs: units as Slurm's (memory, time limit), the
--export forms, the default working directory the agent checks, and the line `tcl submit`
prints. Tables, plus properties for the parsers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tcluster.agent.runtime.base import TaskSpec
from tcluster.agent.runtime.launch import Identity
from tcluster.agent.runtime.workdir import explain_exec_failure, task_cwd
from tcluster.cli.export import MAX_EXPORT_BYTES, exported_env
from tcluster.cli.main import build_parser
from tcluster.cli.spec import submission_spec
from tcluster.cli.submitsummary import summary_line
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources, parse_resource_string
from tcluster.domain.slurmunits import format_memory, parse_memory, parse_time_limit

MI, GI = 2**20, 2**30


@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4 * GI), (4096, 4 * GI), ("4", 4 * MI), ("4.5", int(4.5 * MI)), ("512M", 512 * MI),
    ("4G", 4 * GI), ("4g", 4 * GI), ("2T", 2 * 2**40), ("8192K", 8 * MI), ("4Gi", 4 * GI), ("512Mi", 512 * MI),
    ("1GiB", GI), ("500MB", 500_000_000), ("0.5GB", 500_000_000), ("8388608B", 8 * MI), ("unlimited", 0),
    (" Unlimited ", 0), (0.5 * 1024, 512 * MI),
])
def test_memory_reads_as_slurm(text: str | float, expected: int) -> None:
    assert parse_memory(text, "--mem") == expected


@pytest.mark.parametrize(("text", "named"), [
    ("0", ["--mem", "unlimited"]), (0, ["unlimited"]), ("0Gi", ["unlimited"]),
    ("0.5", ["MiB", "4 MiB", "0.5G"]), ("3", ["3 MiB", "4 MiB"]), ("4096B", ["4096 bytes", "4 MiB"]),
    ("1K", ["1024 bytes"]), ("lots", ["--mem", "bare number is MiB"]), ("4X", ["unit 'X'"]),
    ("-4", ["--mem"]), (True, ["not a size"]),
])
def test_bad_memory_is_refused_naming_the_unit(text: str | bool, named: list[str]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_memory(text, "--mem")
    for word in named:
        assert word in str(caught.value)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 5400), (90, 5400), ("1.5", 90), ("0", 0), ("45:00", 2700), ("1:30:00", 5400), ("2-00", 172800),
    ("1-12", 129600), ("2-00:30", 174600), ("2-00:00:00", 172800), ("90s", 90), ("15m", 900), ("1h30m", 5400),
    ("2d", 172800),
])
def test_time_limit_reads_as_slurm(text: str | int, seconds: float) -> None:
    assert parse_time_limit(text, "--time-limit") == seconds


@pytest.mark.parametrize("text", ["5x", "-3", "1:xx", "", "h"])
def test_bad_time_limit_names_the_flag_and_the_forms(text: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_time_limit(text, "--time-limit")
    assert "--time-limit" in str(caught.value) and "minutes" in str(caught.value)


@given(st.integers(min_value=4, max_value=2**30))
def test_a_bare_number_is_mib_and_reads_back(mib: int) -> None:
    size = parse_memory(str(mib))
    assert size == mib * MI and parse_memory(format_memory(size)) == size


@given(st.integers(min_value=0, max_value=10**6))
def test_a_bare_time_limit_is_minutes(minutes: int) -> None:
    assert parse_time_limit(str(minutes)) == minutes * 60 == parse_time_limit(f"{minutes}m")


@pytest.mark.parametrize(("argv", "memory"), [
    (["--resources", "cpu=1; memory=unlimited"], 0), (["--resources", "cpu=1"], 512 * MI),
    (["--resources", "memory=unlimited", "--mem", "2G"], 2 * GI), (["--mem", "unlimited"], 0),
])
def test_unlimited_memory_is_kept_from_every_layer(argv: list[str], memory: int) -> None:
    assert spec_of([*argv, "--", "true"], {}).resources.memory == memory


def test_exported_values_are_the_owners_secrets() -> None:
    from tcluster.views.redaction import REDACTED, hidden_fields, redact_spec
    spec = spec_of(["--", "true"], {"MYVAR": "secret"})
    assert dict(redact_spec(spec, hidden_fields(False, False)).env) == {"MYVAR": REDACTED}
    assert dict(redact_spec(spec, hidden_fields(True, False)).env) == {"MYVAR": "secret"}


def test_resources_of_a_job_read_memory_as_mem_does_and_others_as_bytes() -> None:
    assert parse_resource_string("cpu_num=0.5; memory=4096", request=True) == Resources(0.5, 4 * GI)
    assert parse_resource_string("memory=4096").memory == 4096      # node capacity, queue files, tcl sim


ENV = {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "x", "TCL_TOKEN": "secret", "SSH_AUTH_SOCK": "/s",
       "DISPLAY": ":0", "XDG_SESSION_ID": "3", "DBUS_SESSION_BUS_ADDRESS": "unix:x", "HOME": "/home/a",
       "BASH_FUNC_f%%": "() { :; }", "TCL_JOB_ID": "parent", "TCL_MASTER": "m:7070"}


@pytest.mark.parametrize(("spec", "expected"), [
    (None, {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "x", "TCL_MASTER": "m:7070"}),
    ("ALL", {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "x", "TCL_MASTER": "m:7070"}),
    ("NONE", {}),
    ("MYVAR", {"MYVAR": "x"}),
    ("MYVAR,B=2", {"MYVAR": "x", "B": "2"}),
    ("UNSET_IN_SHELL", {}),
    ("ALL,MYVAR=y", {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "y", "TCL_MASTER": "m:7070"}),
    ("NONE,B=2", {"B": "2"}),
    ("all", {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "x", "TCL_MASTER": "m:7070"}),
    ("DISPLAY", {"DISPLAY": ":0"}),             # named: the user's choice, even from the deny-list
    ("A=x=y", {"A": "x=y"}),
])
def test_export_has_slurms_meaning(spec: str | None, expected: dict[str, str]) -> None:
    assert dict(exported_env(spec, ENV)) == expected


@pytest.mark.parametrize(("spec", "named"), [("MY-VAR", "MY-VAR"), ("A,,B", "empty item"), ("1X=2", "1X")])
def test_bad_export_names_what_is_wrong(spec: str, named: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        exported_env(spec, ENV)
    assert "--export" in str(caught.value) and named in str(caught.value)


def test_an_environment_too_large_is_refused_naming_the_largest_variable() -> None:
    big = {"SMALL": "1", "HUGE": "x" * MAX_EXPORT_BYTES}
    with pytest.raises(InvalidArgument) as caught:
        exported_env(None, big)
    assert "HUGE" in str(caught.value) and "--export NONE" in str(caught.value)
    assert exported_env("SMALL", big) == (("SMALL", "1"),)


def spec_of(argv: list[str], environ: dict[str, str], cwd: str = "/home/a/proj") -> JobSpec:
    return submission_spec(build_parser().parse_args(["submit", *argv]), environ=environ, cwd=cwd)


def test_exported_values_go_under_env_which_wins() -> None:
    spec = spec_of(["--env", "MYVAR=flag", "--", "./run.sh"], ENV)
    assert dict(spec.env) == {"PATH": "/opt/venv/bin:/usr/bin", "MYVAR": "flag", "TCL_MASTER": "m:7070"}
    assert spec.submit_dir == "/home/a/proj" and spec.workdir == ""


def test_the_submit_directory_is_pwd_when_it_names_this_directory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(real)
    args = build_parser().parse_args(["submit", "--export", "NONE", "--", "true"])
    assert submission_spec(args, environ={"PWD": str(tmp_path / "link")}).submit_dir == str(tmp_path / "link")
    assert submission_spec(args, environ={"PWD": "/elsewhere"}).submit_dir == str(real)


@pytest.mark.parametrize(("argv", "line"), [
    (["--tasks", "4", "--cpu", "0.5", "--mem", "4096", "--time-limit", "90"],
     "4 tasks × cpu 0.5, memory 4Gi, time limit 1h30m, in /home/a/proj"),
    (["--mem", "unlimited", "--gpus", "1"], "1 task × cpu 1, memory unlimited, gpu 1, in /home/a/proj"),
    (["--array", "0-9%2", "--workdir", "/srv"], "10 tasks × cpu 1, memory 512Mi, in /srv"),
    (["--image", "alpine"], "1 task × cpu 1, memory 512Mi, in the image's working directory"),
])
def test_the_submit_line_says_what_was_understood(argv: list[str], line: str) -> None:
    assert summary_line(spec_of([*argv, "--", "true"], {})) == line


NOBODY = Identity(65534, 65534, (65534,), "nobody", "/nonexistent")


def task(workdir: str = "", submit_dir: str = "", command: tuple[str, ...] = ("./run.sh",),
         namespaces: bool = True, env: tuple[tuple[str, str], ...] = ()) -> TaskSpec:
    return TaskSpec(key="k.0", task_id="k", attempt=0, command=command, resources=Resources(1, 64 * MI),
                    stdout_path="/l/out", stderr_path="/l/err", workdir=workdir, submit_dir=submit_dir,
                    namespaces=namespaces, env=env)


def test_the_working_directory_is_workdir_then_the_submit_directory_then_tmp(tmp_path: Path) -> None:
    other = tmp_path / "w"
    other.mkdir()
    # namespaces=False: tmp_path is under the host's /tmp, which a namespaced task never sees
    assert task_cwd(task(submit_dir=str(tmp_path), namespaces=False), None) == str(tmp_path)
    assert task_cwd(task(workdir=str(other), submit_dir=str(tmp_path), namespaces=False), None) == str(other)
    assert task_cwd(task(), None) == "/tmp"


@pytest.mark.parametrize(("where", "ident", "named"), [
    ("missing", None, ["does not exist", "--workdir"]),
    ("file", None, ["is not a directory"]),
    ("private", NOBODY, ["cannot be entered by the task's user nobody"]),
])
def test_a_directory_the_task_cannot_reach_fails_naming_it(tmp_path: Path, where: str, ident: Identity | None,
                                                           named: list[str]) -> None:
    from tcluster.agent.runtime.base import LaunchError
    (tmp_path / "file").write_text("")
    (tmp_path / "private").mkdir(mode=0o700)
    path = str(tmp_path / where)
    with pytest.raises(LaunchError) as caught:
        task_cwd(task(submit_dir=path, namespaces=False), ident)
    for word in [path, "the directory tcl submit ran in", *named]:
        assert word in str(caught.value)


def test_a_directory_under_tmp_is_refused_as_the_tasks_tmp_is_private() -> None:
    from tcluster.agent.runtime.base import LaunchError
    with pytest.raises(LaunchError, match=r"/tmp/proj \(--workdir\) is under /tmp, but the task's /tmp is private"):
        task_cwd(task(workdir="/tmp/proj"), None)
    assert task_cwd(task(workdir="/tmp", namespaces=False), None) == "/tmp"      # no namespace: the host's


ENOENT = "exec failed: No such file or directory: './run.sh'"


@pytest.mark.parametrize(("spec", "cwd", "expected"), [
    (task(), "/home/a/proj",
     f"{ENOENT} not found in the task's working directory /home/a/proj; the task's /tmp is private"),
    (task(command=("/opt/x",)), "/srv", "exec failed: No such file or directory: '/opt/x' not found on this node;"),
    (task(command=("nosuch",), env=(("PATH", "/opt/bin"),)), "/srv",
     "exec failed: No such file or directory: 'nosuch' not found (or not executable) in the task's PATH /opt/bin"),
    (task(command=("nosuch",)), "/srv", "'nosuch' not found (or not executable) in the task's PATH /usr/local/"),
])
def test_a_command_not_found_says_where_it_was_looked_for(spec: TaskSpec, cwd: str, expected: str) -> None:
    said = explain_exec_failure(ENOENT.replace("./run.sh", spec.command[0]), spec, cwd)
    assert said.startswith(expected) or expected in said


def test_a_script_whose_interpreter_is_missing_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("#!/no/such/sh\n")
    said = explain_exec_failure(ENOENT, task(namespaces=False), str(tmp_path))
    assert said == f"{ENOENT} is in {tmp_path}, but the interpreter named on its #! line is missing"


def test_other_failures_are_left_as_they_are() -> None:
    assert explain_exec_failure("cannot set the hostname: x", task(), "/") == "cannot set the hostname: x"


def test_the_submitting_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_E2E_PROBE", "here")
    monkeypatch.setenv("TCL_TOKEN", "never")
    env = dict(submission_spec(build_parser().parse_args(["submit", "--", "true"])).env)
    assert env["TCL_E2E_PROBE"] == "here" and "TCL_TOKEN" not in env
    assert os.environ["TCL_TOKEN"] == "never"
