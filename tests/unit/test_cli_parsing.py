"""`tcl` argument parsing and flags -> JobSpec, table-driven. No network."""

from __future__ import annotations

import pytest

from tcluster.cli.client import check_master_address
from tcluster.cli.main import build_parser, main
from tcluster.cli.spec import submission_spec
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources

MI = 1024**2
GI = 1024**3


def parse(argv: list[str]):
    return build_parser().parse_args(argv)


def spec_of(argv: list[str]) -> JobSpec:
    return submission_spec(parse(["submit", *argv]), environ={}, cwd="")    # nothing of this shell


@pytest.mark.parametrize(
    ("argv", "output", "command_name"),
    [
        (["jobs"], "table", "jobs"),
        (["-o", "json", "jobs"], "json", "jobs"),
        (["jobs", "-o", "json"], "json", "jobs"),
        (["--output", "json", "nodes"], "json", "nodes"),
        (["nodes", "--output=json"], "json", "nodes"),
        (["-o", "json", "status", "j1", "-o", "table"], "table", "status"),  # the later one wins
        (["submit", "-o", "json", "--", "echo", "-o", "x"], "json", "submit"),
    ],
)
def test_output_option_before_or_after_the_subcommand(argv, output, command_name):
    args = parse(argv)
    assert (args.output, args.command_name) == (output, command_name)


@pytest.mark.parametrize(
    ("env", "argv", "master"),
    [
        (None, ["jobs"], "127.0.0.1:7070"),
        ("10.0.0.5:9000", ["jobs"], "10.0.0.5:9000"),
        ("10.0.0.5:9000", ["--master", "h:1", "jobs"], "h:1"),
        ("10.0.0.5:9000", ["jobs", "--master", "h:2"], "h:2"),
    ],
)
def test_master_address_comes_from_flag_then_env_then_default(monkeypatch, tmp_path, env, argv, master):
    # no stored login: the last `tcl login` (or `tcl dev`) would otherwise be the default
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    if env is None:
        monkeypatch.delenv("TCL_MASTER", raising=False)
    else:
        monkeypatch.setenv("TCL_MASTER", env)
    assert parse(argv).master == master


@pytest.mark.parametrize("address", ["127.0.0.1:7070", "master.lan:1", "[::1]:7070", "unix:/run/tcl.sock"])
def test_good_master_addresses(address):
    assert check_master_address(address) == address


@pytest.mark.parametrize("address", ["localhost", "host:", ":7070", "host:99999", "host:port"])
def test_bad_master_addresses_name_the_flag(address):
    with pytest.raises(InvalidArgument, match="--master"):
        check_master_address(address)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--", "echo", "hi"], {"command": ("echo", "hi"), "resources": Resources(1.0, 512 * MI), "queue": "default", "tasks": 1}),
        (["--cpu", "0.5", "--", "x"], {"resources": Resources(0.5, 512 * MI)}),
        (["--mem", "2Gi", "--", "x"], {"resources": Resources(1.0, 2 * GI)}),
        (["--cpu", "250m", "--mem", "0.5GB", "--", "x"], {"resources": Resources(0.25, 500_000_000)}),
        (["--resources", "cpu_num=0.5; memory=0.5GB", "--", "x"], {"resources": Resources(0.5, 500_000_000)}),
        (["--resources", "cpu_num=2; memory=1Gi", "--cpu", "3", "--", "x"], {"resources": Resources(3.0, GI)}),
        (["--resources", "net=10Mbit", "--", "x"], {"resources": Resources(1.0, 512 * MI, (("net", 1e7),))}),
        (["--gpus", "2", "--", "x"], {"resources": Resources(1.0, 512 * MI, (("gpu", 2.0),))}),
        (["--resources", "gpus=1", "--gpus", "4", "--", "x"], {"resources": Resources(1.0, 512 * MI, (("gpu", 4.0),))}),
        (["--gpus", "0", "--", "x"], {"resources": Resources(1.0, 512 * MI)}),
        (["--tasks", "4", "--queue", "ads.prod", "--name", "train", "--", "x"], {"tasks": 4, "queue": "ads.prod", "name": "train"}),
        (["--env", "A=1", "--env", "B=x=y", "--", "x"], {"env": (("A", "1"), ("B", "x=y"))}),
        (["--label", "team=ads", "--", "x"], {"labels": (("team", "ads"),)}),
        (["--user", "alice", "--workdir", "/tmp", "--", "x"], {"user": "alice", "workdir": "/tmp"}),
        (["--", "sh", "-c", "a -- b", "--", "c"], {"command": ("sh", "-c", "a -- b", "--", "c")}),
        (["echo", "hi"], {"command": ("echo", "hi")}),
    ],
)
def test_submit_flags_build_the_spec(argv, expected):
    spec = spec_of(argv)
    for field, value in expected.items():
        assert getattr(spec, field) == value, field


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--mem", "lots", "--", "x"], ["--mem", "Mi", "GB"]),
        (["--mem", "5parsecs", "--", "x"], ["--mem", "allowed"]),
        (["--cpu", "two", "--", "x"], ["--cpu"]),
        (["--resources", "cpu_num", "--", "x"], ["--resources", "key=value"]),
        (["--resources", "memory=much", "--", "x"], ["--resources.memory", "Mi"]),
        (["--env", "NOEQUALS", "--", "x"], ["--env", "KEY=value"]),
        (["--env", "1BAD=x", "--", "x"], ["env"]),
        ([], ["command", "empty"]),
        (["--tasks", "0", "--", "x"], ["tasks", "1..10000"]),
        (["--queue", "bad queue", "--", "x"], ["queue"]),
        (["--workdir", "relative", "--", "x"], ["workdir", "absolute"]),
        (["--cpu", "0", "--mem", "unlimited", "--", "x"], ["resources", "empty"]),
        (["--resources", "gpu=0.5", "--", "x"], ["gpu", "whole number"]),
    ],
)
def test_bad_submit_input_names_the_field(argv, names):
    with pytest.raises(InvalidArgument) as caught:
        spec_of(argv)
    for name in names:
        assert name in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "COMMAND"),
        (["frobnicate"], "invalid choice"),
        (["-o", "yaml", "jobs"], "invalid choice"),
        (["jobs", "--state", "sleeping"], "--state"),
        (["jobs", "--limit", "-1"], "--limit"),
        (["logs"], "ID"),
        (["submit", "--tasks", "many", "--", "x"], "--tasks"),
        (["submit", "--gpus", "1.5", "--", "x"], "--gpus"),
        (["submit", "--gpus", "-1", "--", "x"], "--gpus"),
        (["dev", "--memory", "lots"], "--memory"),
        (["dev", "--runtime", "docker"], "--runtime"),
    ],
)
def test_argparse_errors_exit_2_naming_the_option(capsys, argv, fragment):
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["jobs", "--state", "running", "--state", "FAILED"], "state", ["RUNNING", "FAILED"]),
        (["jobs", "-a"], "all", True),
        (["jobs", "--limit", "5"], "limit", 5),
        (["logs", "j1", "--task", "2", "--stderr", "--tail", "4Ki"], "tail", "4Ki"),
        (["dev"], "data_dir", "./.tcluster"),
        (["dev"], "listen", "127.0.0.1:7070"),
        (["dev"], "runtime", "auto"),
        (["dev", "--cpus", "500m"], "cpus", 0.5),
        (["dev", "--memory", "4Gi"], "memory", 4 * GI),
        (["dev", "--node", "n1"], "node", "n1"),
    ],
)
def test_query_and_dev_options(argv, field, value):
    assert getattr(parse(argv), field) == value


def test_help_exits_0(capsys):
    assert main(["submit", "--help"]) == 0
    assert "512Mi" in capsys.readouterr().out  # the defaults are documented


def test_dev_calls_run_dev_with_the_namespace(monkeypatch):
    import sys
    import types

    seen = {}
    fake = types.ModuleType("tcluster.cli.devmode")
    fake.run_dev = lambda args: seen.setdefault("args", args) and 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tcluster.cli.devmode", fake)
    assert main(["dev", "--listen", "127.0.0.1:0", "--runtime", "process"]) == 7
    assert (seen["args"].listen, seen["args"].runtime) == ("127.0.0.1:0", "process")
