"""`-o json` contract (field names, timestamps, enum names) and the human tables."""

from __future__ import annotations

import json

import pytest

from tcluster.cli.replies import reply_job_json as job_json, reply_node_json as node_json, reply_task_json
from tcluster.views.formats import signal_name, timestamp
from tcluster.cli.tables import (
    exit_cell, failure_summary, format_age, format_table, job_view, jobs_table, nodes_table,
    progress_line, tasks_cell,
)
from tcluster.v1 import common_pb2, jobs_pb2

MI = 1024**2
SUBMITTED = 1795341600.123  # 2026-11-22T10:00:00.123Z
NOW = SUBMITTED + 300

JOB_FIELDS = {
    "id", "name", "queue", "state", "submitted_at", "finished_at", "resources", "command",
    "tasks_total", "pending_reason", "tasks",
}
TASK_FIELDS = {
    "index", "id", "state", "node", "attempt", "exit_code", "signal", "reason", "started_at",
    "finished_at", "usage",
}
USAGE_FIELDS = {
    "cpu_seconds", "cpu_rate", "memory_bytes", "memory_peak_bytes", "memory_anon_bytes",
    "memory_file_bytes", "pids",
}
NODE_FIELDS = {"name", "state", "capacity", "free", "reserved", "labels", "tasks", "last_seen"}


def make_task(index: int, state: int, **fields) -> jobs_pb2.Task:
    return jobs_pb2.Task(index=index, id=f"j1.{index}", state=state, **fields)


def task_json(msg: jobs_pb2.Task) -> dict:
    return reply_task_json("j1", msg)


def make_job(**fields) -> jobs_pb2.Job:
    spec = jobs_pb2.JobSpec(
        name="train", queue="ads.prod", tasks=4, command=["python3", "job.py", "--x", "a b"],
        resources=common_pb2.Resources(cpu=0.5, memory=512 * MI, other={"net": 1e7}),
    )
    job = jobs_pb2.Job(id="j1", spec=spec, state=jobs_pb2.JOB_RUNNING, submitted_at=SUBMITTED)
    job.tasks.extend([
        make_task(0, common_pb2.TASK_SUCCEEDED, node="n1", has_exit_code=True, exit_code=0, started_at=SUBMITTED + 1,
                  finished_at=SUBMITTED + 9, usage=common_pb2.TaskUsage(cpu_seconds=7.25, memory_peak_bytes=100 * MI, sampled_at=SUBMITTED + 9)),
        make_task(1, common_pb2.TASK_KILLED, node="n2", signal=9, reason="OOM killed"),
        make_task(2, common_pb2.TASK_RUNNING, node="n1", usage=common_pb2.TaskUsage(
            cpu_seconds=12.5, cpu_rate=0.42, memory_bytes=64 * MI, memory_peak_bytes=80 * MI, sampled_at=NOW)),
        make_task(3, common_pb2.TASK_PENDING, reason="no node has 512Mi memory free"),
    ])
    for key, value in fields.items():
        setattr(job, key, value)
    return job


def make_node() -> jobs_pb2.Node:
    return jobs_pb2.Node(
        name="n1", state="READY", labels={"zone": "a", "gpu": "no"}, tasks=["j1.0", "j1.2"], last_seen=SUBMITTED,
        capacity=common_pb2.Resources(cpu=4, memory=8192 * MI),
        free=common_pb2.Resources(cpu=2.5, memory=6144 * MI),
        reserved=common_pb2.Resources(cpu=0.5, memory=512 * MI),
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, None),
        (0.0, None),
        (SUBMITTED, "2026-11-22T10:00:00.123Z"),
        (1795341600, "2026-11-22T10:00:00.000Z"),
        (1795341600.9996, "2026-11-22T10:00:01.000Z"),  # rounds into the next second
        (1.5, "1970-01-01T00:00:01.500Z"),
    ],
)
def test_timestamps_are_rfc3339_utc_with_millis(seconds, text):
    assert timestamp(seconds) == text


def test_job_json_has_the_contract_fields():
    body = job_json(make_job())
    assert JOB_FIELDS <= body.keys()
    assert body["state"] == "RUNNING"
    assert body["submitted_at"] == "2026-11-22T10:00:00.123Z"
    assert body["finished_at"] is None
    assert body["resources"] == {"cpu": 0.5, "memory": 512 * MI, "net": 1e7}
    assert isinstance(body["resources"]["memory"], int)
    assert body["command"] == ["python3", "job.py", "--x", "a b"]
    assert body["tasks_total"] == 4
    json.dumps(body)  # serialisable as is


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, {"state": "SUCCEEDED", "exit_code": 0, "signal": 0, "node": "n1", "started_at": "2026-11-22T10:00:01.123Z"}),
        (1, {"state": "KILLED", "exit_code": None, "signal": 9, "signal_name": "SIGKILL", "reason": "OOM killed"}),
        (2, {"state": "RUNNING", "exit_code": None, "finished_at": None}),
        (3, {"state": "PENDING", "node": "", "started_at": None}),
    ],
)
def test_task_json_fields(index, expected):
    body = task_json(make_job().tasks[index])
    assert TASK_FIELDS <= body.keys() and USAGE_FIELDS <= body["usage"].keys()
    for field, value in expected.items():
        assert body[field] == value, field


def test_task_usage_json():
    usage = task_json(make_job().tasks[2])["usage"]
    assert usage["cpu_seconds"] == 12.5 and usage["cpu_rate"] == 0.42
    assert usage["memory_bytes"] == 64 * MI and usage["memory_peak_bytes"] == 80 * MI


@pytest.mark.parametrize(
    ("state", "name"),
    [(jobs_pb2.JOB_PENDING, "PENDING"), (jobs_pb2.JOB_SUCCEEDED, "SUCCEEDED"), (jobs_pb2.JOB_FAILED, "FAILED"),
     (jobs_pb2.JOB_CANCELLED, "CANCELLED"), (0, "UNSPECIFIED")],
)
def test_job_state_names_drop_the_proto_prefix(state, name):
    assert job_json(make_job(state=state))["state"] == name


@pytest.mark.parametrize(
    ("state", "name"),
    [(common_pb2.TASK_STARTING, "STARTING"), (common_pb2.TASK_FAILED, "FAILED"), (common_pb2.TASK_LOST, "LOST")],
)
def test_task_state_names_drop_the_proto_prefix(state, name):
    assert task_json(make_task(0, state))["state"] == name


def test_node_json_has_the_contract_fields():
    body = node_json(make_node())
    assert NODE_FIELDS <= body.keys()
    assert body["capacity"] == {"cpu": 4.0, "memory": 8192 * MI}
    assert body["free"]["memory"] == 6144 * MI
    assert body["used"] == {"cpu": 1.5, "memory": 2048 * MI}
    assert body["labels"] == {"gpu": "no", "zone": "a"}
    assert body["tasks"] == ["j1.0", "j1.2"]
    assert body["last_seen"] == "2026-11-22T10:00:00.123Z"


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (5.9, "5s"), (59, "59s"), (60, "1m"), (3599, "59m"),
                                                 (7200, "2h"), (86400 * 3 + 5, "3d"), (-4, "0s")])
def test_age(seconds, text):
    assert format_age(seconds) == text


@pytest.mark.parametrize(("number", "name"), [(0, None), (9, "SIGKILL"), (15, "SIGTERM"), (200, "SIG200")])
def test_signal_names(number, name):
    assert signal_name(number) == name


def row_of(table: str, first_cell: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if line.split()[:1] == [first_cell])


def test_jobs_table_cells():
    table = jobs_table([make_job()], now=NOW)
    assert table.splitlines()[0].split() == ["ID", "NAME", "QUEUE", "OWNER", "STATE", "TASKS", "CPU", "MEM", "SUBMITTED"]
    assert row_of(table, "j1") == ["j1", "train", "ads.prod", "-", "RUNNING", "2/4", "done", "0.5", "512Mi", "5m"]


def test_tasks_cell_counts_terminal_tasks():
    assert tasks_cell(make_job()) == "2/4 done"


def test_status_view_has_header_and_task_rows():
    view = job_view(make_job(pending_reason="waiting for memory"), now=NOW)
    for text in ("ID:", "j1", "Queue:", "ads.prod", "State:", "RUNNING", "2026-11-22T10:00:00.123Z (5m ago)",
                 "cpu=0.5 memory=512Mi net=1e+07 per task", "python3 job.py --x 'a b'", "Pending:", "waiting for memory"):
        assert text in view
    assert row_of(view, "INDEX") == ["INDEX", "STATE", "NODE", "TRY", "EXIT", "CPU-S", "CPU%", "MEM", "PEAK", "REASON"]
    assert row_of(view, "0")[:5] == ["0", "SUCCEEDED", "n1", "-", "0"]
    assert row_of(view, "1")[:5] == ["1", "KILLED", "n2", "-", "SIGKILL"]
    assert row_of(view, "2") == ["2", "RUNNING", "n1", "-", "-", "12.5", "42%", "64Mi", "80Mi", "-"]
    assert row_of(view, "3")[:5] == ["3", "PENDING", "-", "-", "-"]


@pytest.mark.parametrize(
    ("fields", "cell"),
    [({}, "-"), ({"has_exit_code": True, "exit_code": 3}, "3"), ({"signal": 9}, "SIGKILL"),
     ({"has_exit_code": True, "exit_code": 137, "signal": 9}, "SIGKILL")],
)
def test_exit_cell(fields, cell):
    assert exit_cell(make_task(0, common_pb2.TASK_FAILED, **fields)) == cell


def test_nodes_table_cells():
    table = nodes_table([make_node()])
    assert table.splitlines()[0].split() == ["NAME", "STATE", "CPU", "MEM", "FREE", "CPU", "FREE", "MEM", "TASKS", "LABELS"]
    assert row_of(table, "n1") == ["n1", "READY", "1.5/4", "2Gi/8Gi", "2.5", "6Gi", "2", "gpu=no,zone=a"]


def test_format_table_aligns_columns():
    assert format_table(("A", "LONGER"), [("xyz", "1"), ("q", "22")]).splitlines() == [
        "A    LONGER", "xyz  1", "q    22",
    ]


def test_progress_and_failure_lines():
    job = make_job(state=jobs_pb2.JOB_FAILED)
    assert progress_line(job) == "job j1: FAILED (tasks: 1 PENDING, 1 RUNNING, 1 SUCCEEDED, 1 KILLED)"
    assert failure_summary(job) == "task 1 KILLED (exit SIGKILL, OOM killed)"
