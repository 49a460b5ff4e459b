"""`tcl` against a fake master on 127.0.0.1 port 0: exit codes, stdout, stderr, JSON."""

from __future__ import annotations

import itertools
import json
import os
import threading
from concurrent import futures
from typing import Iterator

import grpc
import pytest

from tcluster.cli import commands
from tcluster.cli.main import main
from tcluster.cli.spec import submit_directory
from tcluster.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from testkit.procs import closed_port

NO_NODE_HAS_MORE_THAN = 64 * 1024**3
LOG_CHUNKS = (b"hello\n", b"\xff\x00binary\n")
SUBMITTED_AT = 1795341600.123


class FakeJobService(jobs_pb2_grpc.JobServiceServicer):
    """Jobs advance one step per Get: PENDING -> RUNNING -> SUCCEEDED (FAILED if named 'fails')."""

    def __init__(self) -> None:
        self.jobs: dict[str, jobs_pb2.Job] = {}
        self.requests: list[object] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def Submit(self, request: jobs_pb2.SubmitRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        self.requests.append(request)
        if request.spec.resources.memory > NO_NODE_HAS_MORE_THAN:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "resources.memory: no node can ever fit this request (largest node: 64Gi)")
        with self._lock:
            job = jobs_pb2.Job(id=f"job-{next(self._ids)}", spec=request.spec, state=jobs_pb2.JOB_PENDING,
                               submitted_at=SUBMITTED_AT)
            job.tasks.extend(jobs_pb2.Task(index=i, id=f"{job.id}.{i}", state=common_pb2.TASK_PENDING)
                             for i in range(request.spec.tasks))
            self.jobs[job.id] = job
        return job

    def Get(self, request: jobs_pb2.GetJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        job = self._known(request.id, context)
        self._advance(job)
        return job

    def List(self, request: jobs_pb2.ListJobsRequest, context: grpc.ServicerContext) -> jobs_pb2.ListJobsResponse:
        self.requests.append(request)
        wanted = set(request.states)
        return jobs_pb2.ListJobsResponse(jobs=[j for j in self.jobs.values() if not wanted or j.state in wanted])

    def Cancel(self, request: jobs_pb2.CancelJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        job = self._known(request.id, context)
        job.state = jobs_pb2.JOB_CANCELLED
        return job

    def Logs(self, request: jobs_pb2.LogsRequest, context: grpc.ServicerContext) -> Iterator[jobs_pb2.LogChunk]:
        self.requests.append(request)
        if request.task_index == 9:
            context.abort(grpc.StatusCode.UNAVAILABLE, "agent on node n2 is unreachable")
        self._known(request.job_id, context)
        for data in LOG_CHUNKS:
            yield jobs_pb2.LogChunk(data=data)

    def _known(self, job_id: str, context: grpc.ServicerContext) -> jobs_pb2.Job:
        if job_id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {job_id!r} not found")
        return self.jobs[job_id]

    @staticmethod
    def _advance(job: jobs_pb2.Job) -> None:
        final = (jobs_pb2.JOB_FAILED, common_pb2.TASK_FAILED) if job.spec.name == "fails" else (
            jobs_pb2.JOB_SUCCEEDED, common_pb2.TASK_SUCCEEDED)
        job_state, task_state = {
            jobs_pb2.JOB_PENDING: (jobs_pb2.JOB_RUNNING, common_pb2.TASK_RUNNING),
        }.get(job.state, final)
        if job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED):
            return
        job.state = job_state
        for task in job.tasks:
            task.state = task_state
            if task_state == common_pb2.TASK_FAILED:
                task.has_exit_code, task.exit_code = True, 3


class FakeClusterService(jobs_pb2_grpc.ClusterServiceServicer):
    def ListNodes(self, request: jobs_pb2.ListNodesRequest, context: grpc.ServicerContext) -> jobs_pb2.ListNodesResponse:
        node = jobs_pb2.Node(
            name="n1", state="READY", labels={"zone": "a"}, tasks=["job-1.0"],
            capacity=common_pb2.Resources(cpu=4, memory=8 * 1024**3),
            free=common_pb2.Resources(cpu=3, memory=7 * 1024**3),
        )
        return jobs_pb2.ListNodesResponse(nodes=[node])


@pytest.fixture()
def fake_master(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, FakeJobService]]:
    monkeypatch.delenv("TCL_MASTER", raising=False)
    monkeypatch.setattr(commands, "POLL_INTERVAL_SECONDS", 0.0)  # --wait polls without sleeping
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    jobs = FakeJobService()
    jobs_pb2_grpc.add_JobServiceServicer_to_server(jobs, server)
    jobs_pb2_grpc.add_ClusterServiceServicer_to_server(FakeClusterService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", jobs
    server.stop(None)


def tcl(master: str, *argv: str) -> int:
    return main(["--master", master, *argv])


def test_submit_prints_only_the_job_id(fake_master, capsys):
    master, jobs = fake_master
    assert tcl(master, "submit", "--name", "hello", "--cpu", "0.5", "--mem", "256Mi", "--env", "A=1", "--export", "NONE",
               "--", "echo", "hi") == 0
    captured = capsys.readouterr()
    assert captured.out == "job-1\n"
    here = submit_directory(os.environ)
    assert here and f"job-1: 1 task × cpu 0.5, memory 256Mi, in {here}" in captured.err     # what it understood
    spec = jobs.requests[0].spec
    assert (list(spec.command), spec.resources.cpu, spec.resources.memory, dict(spec.env)) == (
        ["echo", "hi"], 0.5, 256 * 1024**2, {"A": "1"})


def test_submit_json_prints_the_job(fake_master, capsys):
    master, _ = fake_master
    assert tcl(master, "submit", "-o", "json", "--tasks", "2", "--", "true") == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["id"], body["state"], body["tasks_total"], body["queue"]) == ("job-1", "PENDING", 2, "default")
    assert body["resources"] == {"cpu": 1.0, "memory": 512 * 1024**2}
    assert body["submitted_at"] == "2026-11-22T10:00:00.123Z"
    assert [task["state"] for task in body["tasks"]] == ["PENDING", "PENDING"]


@pytest.mark.parametrize(("name", "exit_code", "final"), [("ok", 0, "SUCCEEDED"), ("fails", 1, "FAILED")])
def test_submit_wait_exit_code_follows_the_job(fake_master, capsys, name, exit_code, final):
    master, _ = fake_master
    assert tcl(master, "submit", "--wait", "--name", name, "--", "true") == exit_code
    captured = capsys.readouterr()
    assert captured.out == "job-1\n"
    assert "job job-1: RUNNING" in captured.err and f"job job-1: {final}" in captured.err


def test_master_refusal_exits_1_with_its_message(fake_master, capsys):
    master, _ = fake_master
    assert tcl(master, "submit", "--mem", "2Ti", "--", "true") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: resources.memory: no node can ever fit this request (largest node: 64Gi)\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["submit", "--mem", "lots", "--", "true"], "--mem"),
        (["submit", "--", ""], "command"),
        (["submit"], "command"),
        (["submit", "-f", "/nonexistent/job.yaml"], "/nonexistent/job.yaml"),
        (["logs", "job-1", "--tail", "much"], "--tail"),
        (["--master", "nonsense", "jobs"], "--master"),
        (["jobs", "--state", "bogus"], "--state"),
    ],
)
def test_usage_errors_exit_2_without_calling_the_master(fake_master, capsys, argv, fragment):
    master, jobs = fake_master
    assert tcl(master, *argv) == 2
    captured = capsys.readouterr()
    assert fragment in captured.err and "Traceback" not in captured.err
    assert jobs.requests == []


def test_bad_job_file_names_file_and_field(fake_master, capsys, tmp_path):
    master, _ = fake_master
    path = tmp_path / "job.yaml"
    path.write_text("command: [true]\nresources: {cpu: lots}\n")
    assert tcl(master, "submit", "-f", str(path)) == 2
    assert f"{path}: resources.cpu" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["status", "cancel", "logs"])
def test_unknown_job_exits_1(fake_master, capsys, command):
    master, _ = fake_master
    assert tcl(master, command, "nope") == 1
    assert capsys.readouterr().err == "error: job 'nope' not found\n"


def test_status_cancel_and_jobs(fake_master, capsys):
    master, _ = fake_master
    assert tcl(master, "submit", "--name", "a", "--", "true") == 0
    assert tcl(master, "status", "job-1") == 0
    assert "State:" in capsys.readouterr().out
    assert tcl(master, "cancel", "job-1") == 0
    assert capsys.readouterr().out == "CANCELLED\n"
    assert tcl(master, "-o", "json", "status", "job-1") == 0
    assert json.loads(capsys.readouterr().out)["state"] == "CANCELLED"
    assert tcl(master, "jobs", "--state", "cancelled") == 0
    assert "job-1" in capsys.readouterr().out
    assert tcl(master, "jobs", "-o", "json", "--state", "running") == 0
    assert json.loads(capsys.readouterr().out) == []


def test_logs_are_written_as_bytes(fake_master, capsysbinary):
    master, jobs = fake_master
    assert tcl(master, "submit", "--", "true") == 0
    capsysbinary.readouterr()
    assert tcl(master, "logs", "job-1", "--stderr", "--tail", "1Ki") == 0
    assert capsysbinary.readouterr().out == b"".join(LOG_CHUNKS)
    request = jobs.requests[-1]
    assert (request.stream, request.tail_bytes, request.task_index) == (jobs_pb2.LOG_STDERR, 1024, 0)


def test_unavailable_from_the_master_itself_shows_its_details(fake_master, capsys):
    master, _ = fake_master
    assert tcl(master, "logs", "job-1", "--task", "9") == 1
    assert capsys.readouterr().err == "error: agent on node n2 is unreachable\n"


def test_nodes_table_and_json(fake_master, capsys):
    master, _ = fake_master
    assert tcl(master, "nodes") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["n1", "READY", "1/4", "1Gi/8Gi", "3", "7Gi", "1", "zone=a"]
    assert tcl(master, "nodes", "-o", "json") == 0
    (node,) = json.loads(capsys.readouterr().out)
    assert (node["name"], node["state"], node["capacity"]["memory"], node["tasks"]) == ("n1", "READY", 8 * 1024**3, ["job-1.0"])


def test_master_address_from_env(fake_master, capsys, monkeypatch):
    master, jobs = fake_master
    monkeypatch.setenv("TCL_MASTER", master)
    assert main(["-o", "json", "jobs"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert isinstance(jobs.requests[-1], jobs_pb2.ListJobsRequest)


@pytest.mark.parametrize("argv", [["jobs"], ["nodes"], ["status", "j1"], ["submit", "--", "true"]])
def test_unreachable_master_exits_1_with_a_hint(capsys, monkeypatch, argv):
    address = closed_port()
    monkeypatch.setenv("TCL_MASTER", address)
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        f"error: cannot reach the master at {address} (is tcl-master running? set --master or TCL_MASTER)\n"
    )
