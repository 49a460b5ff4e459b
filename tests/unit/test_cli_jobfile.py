"""`tcl submit -f job.yaml`: reading job files and merging them with flags."""

from __future__ import annotations

import textwrap

import pytest

from tcluster.cli.jobfile import SHELL, load_job_file, parse_job_file
from tcluster.cli.main import build_parser
from tcluster.cli.spec import submission_spec
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources

MI = 1024**2


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).strip() + "\n"


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("name: train", "name", "train"),
        ("queue: ads.prod", "queue", "ads.prod"),
        ("tasks: 3", "tasks", 3),
        ("resources: {cpu: 0.5, memory: 256Mi}", "resources", Resources(0.5, 256 * MI)),
        ("resources: {cpus: 2, mem: 1Gi}", "resources", Resources(2.0, 1024 * MI)),
        ("resources: 'cpu_num=0.5; memory=0.5GB'", "resources", Resources(0.5, 500_000_000)),
        ("command: [python3, job.py, 3]", "command", ("python3", "job.py", "3")),
        ("command: echo $HOME && sleep 1", "command", (*SHELL, "echo $HOME && sleep 1")),
        ("command: ['/bin/sh', '-c', 'exit 3']", "command", ("/bin/sh", "-c", "exit 3")),
        ("env: {B: 2, A: x, DEBUG: true, V: on}", "env", (("A", "x"), ("B", "2"), ("DEBUG", "true"), ("V", "on"))),
        ("command: [echo, yes, no]", "command", ("echo", "yes", "no")),  # not YAML 1.1 booleans
        ("env: [A=1, B=c=d]", "env", (("A", "1"), ("B", "c=d"))),
        ("user: alice", "user", "alice"),
        ("workdir: /srv/job", "workdir", "/srv/job"),
        ("labels: {team: ads}", "labels", (("team", "ads"),)),
        ("", "command", None),
    ],
)
def test_job_file_fields(text, field, value):
    assert parse_job_file(text).get(field) == value


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("- just\n- a list", ["top level", "mapping"]),
        ("comand: [x]", ["comand", "unknown field", "command"]),
        ("tasks: many", ["tasks", "whole number"]),
        ("tasks: true", ["tasks", "whole number"]),
        ("tasks: 2.5", ["tasks", "whole number"]),
        ("resources: {cpu: 1, memory: lots}", ["resources.memory"]),
        ("resources: {memory: 5parsecs}", ["resources.memory", "allowed"]),
        ("resources: 42", ["resources", "mapping"]),
        ("resources: 'cpu_num'", ["resources", "key=value"]),
        ("resources: {'GPU!': 1}", ["resources", "GPU!"]),
        ("command: {a: b}", ["command"]),
        ("command: [[nested]]", ["command"]),
        ("env: [NOEQUALS]", ["env", "KEY=value"]),
        ("env: {A: [1, 2]}", ["env.A"]),
        ("env: 3", ["env"]),
        ("name: [a]", ["name"]),
        ("name: 'x\n  : : bad", ["YAML"]),
        ("a: b: c", ["YAML", "line 1"]),
    ],
)
def test_bad_job_files_name_the_field(text, names):
    with pytest.raises(InvalidArgument) as caught:
        parse_job_file(text)
    for name in names:
        assert name in str(caught.value)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("resources: {memory: lots}\n")
    with pytest.raises(InvalidArgument, match=r"job\.yaml: resources\.memory"):
        load_job_file(str(path))


def test_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(InvalidArgument, match="nope.yaml: cannot read job file"):
        load_job_file(missing)


JOB_FILE = yaml_text("""
    name: from-file
    queue: ads.prod
    tasks: 2
    resources: {cpu: 2, memory: 1Gi, net: 10Mbit}
    command: [python3, job.py]
    env: {A: file, B: file}
    user: alice
    workdir: /srv
""")


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        ([], "name", "from-file"),
        ([], "resources", Resources(2.0, 1024 * MI, (("net", 1e7),))),
        ([], "command", ("python3", "job.py")),
        (["--name", "cli"], "name", "cli"),
        (["--queue", "default"], "queue", "default"),
        (["--tasks", "5"], "tasks", 5),
        (["--cpu", "0.5"], "resources", Resources(0.5, 1024 * MI, (("net", 1e7),))),
        (["--resources", "memory=2Gi"], "resources", Resources(2.0, 2048 * MI, (("net", 1e7),))),
        (["--env", "B=cli"], "env", (("A", "file"), ("B", "cli"))),
        (["--user", "bob", "--workdir", "/tmp"], "workdir", "/tmp"),
        (["--", "echo", "override"], "command", ("echo", "override")),
    ],
)
def test_flags_override_the_file(tmp_path, flags, field, value):
    path = tmp_path / "job.yaml"
    path.write_text(JOB_FILE)
    spec = submission_spec(build_parser().parse_args(["submit", "-f", str(path), *flags]), environ={}, cwd="")
    assert getattr(spec, field) == value


def test_file_without_resources_gets_the_defaults(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("command: [true]\nresources: {memory: 2Gi}\n")
    spec = submission_spec(build_parser().parse_args(["submit", "-f", str(path)]))
    assert spec.resources == Resources(1.0, 2048 * MI)
