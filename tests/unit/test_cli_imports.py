"""What `tcl` imports per command: a stable guard for its start-up time (bench/cli_startup.py
measures the time itself). `tcl --help` and any `tcl CMD --help` build the parser only: no
grpc, no protobuf. `tcl status` and `tcl jobs` load grpc and the jobs messages, but none of
the daemons' or the simulator's libraries. Each runs in a fresh interpreter; the master's
answers are stubbed in that process, so no network is used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Never for a command that only reads a job or lists jobs.
HEAVY = ("numpy", "scipy", "yaml", "pydantic", "cryptography", "aiohttp", "orjson", "prometheus_client",
         "psutil", "docker", "pyroute2", "aetcd", "tcluster.scheduler", "tcluster.master", "tcluster.agent",
         "tcluster.sim", "tcluster.pack", "tcluster.security", "tcluster.cli.spec", "tcluster.cli.jobfile")
# Not even that for a parser: a command's own module loads them when it runs.
WIRE = ("grpc", "google.protobuf", "tcluster.v1", "tcluster.wire.protobuf", "tcluster.views.render", "tcluster.cli.client",
        "tcluster.cli.commands")

# Runs `tcl ARGV` with MasterClient's calls answered in-process, then prints sys.modules.
PROBE = """
import json, sys
from tcluster.cli import client
from tcluster.v1 import common_pb2, jobs_pb2
job = jobs_pb2.Job(id="j1", state=jobs_pb2.JOB_RUNNING, submitted_at=1.0,
                   spec=jobs_pb2.JobSpec(command=["sleep", "1"], tasks=1),
                   tasks=[jobs_pb2.Task(index=0, id="j1.0", state=common_pb2.TASK_RUNNING, node="n1")])
client.MasterClient.get = lambda self, job_id: job
client.MasterClient.list_jobs = lambda self, *args: ([job], 1)
client.MasterClient.whoami = lambda self: jobs_pb2.WhoAmIResponse(name="alice")   # `tcl jobs`: your own
"""
RUN = """
from tcluster.cli.main import main
code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(argv: list[str], stub_master: bool) -> set[str]:
    """The modules `tcl ARGV` imported (top-level packages and dotted names alike)."""
    source = (PROBE if stub_master else "import json, sys\n") + RUN
    done = subprocess.run([sys.executable, "-c", source, json.dumps(argv)], capture_output=True, text=True,
                          timeout=60, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, done.stderr
    return set(result["modules"])


def offending(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in names))


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["submit", "--help"], ["sim", "--help"],
                                  ["pack", "--help"], ["login", "--help"]])
def test_help_builds_the_parser_without_the_commands(argv: list[str]) -> None:
    modules = loaded(argv, stub_master=False)
    assert offending(modules, HEAVY + WIRE) == []


@pytest.mark.parametrize("argv", [["status", "j1"], ["-o", "json", "status", "j1"], ["jobs"]])
def test_reading_jobs_loads_grpc_and_nothing_heavy(argv: list[str]) -> None:
    modules = loaded(argv, stub_master=True)
    assert "grpc" in modules and "tcluster.v1.jobs_pb2" in modules   # the probe measures the real path
    assert offending(modules, HEAVY) == []


# What the tables print from (the reply itself) needs no job model; only -o json builds
# domain values for the JSON views the dashboard shares.
MODEL = ("tcluster.domain.model", "tcluster.views.render", "tcluster.wire.protobuf", "tcluster.domain.taskusage", "tcluster.domain.specfields")


@pytest.mark.parametrize("argv", [["status", "j1"], ["jobs"]])
def test_tables_print_without_the_job_model(argv: list[str]) -> None:
    assert offending(loaded(argv, stub_master=True), MODEL) == []


def test_json_output_goes_through_the_shared_views() -> None:
    modules = loaded(["-o", "json", "status", "j1"], stub_master=True)
    assert "tcluster.views.render" in modules and "tcluster.domain.model" in modules
