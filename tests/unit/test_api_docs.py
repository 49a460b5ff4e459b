"""The job API's documents are exactly what `tcl -o json` shows: task docs, kept per task
and usage sample, what the shared view gives, before and after usage and task changes; the
usage JSON built from domain values is what the CLI prints from the wire."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings

from tcluster.views.render import task_json, usage_json
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.web.api import TaskDocs
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.wire.protobuf import usage_from_pb, usage_to_pb
from tests.unit.specs import usages


@settings(max_examples=200, deadline=None)
@given(usages)
def test_usage_doc_is_the_proto_round_trip(usage: TaskUsage) -> None:
    assert usage_json(usage) == usage_json(usage_from_pb(usage_to_pb(usage)))


def test_usage_doc_keeps_proto_types_and_timestamps() -> None:
    usage = TaskUsage(cpu_rate=1, memory_bytes=5, sampled_at=1700000000.9996)   # an int where proto has a double
    doc, reference = usage_json(usage), usage_json(usage_from_pb(usage_to_pb(usage)))
    assert doc == reference and type(doc["cpu_rate"]) is float and doc["sampled_at"] == reference["sampled_at"]
    assert doc["sampled_at"] == "2023-11-14T22:13:21.000Z" and type(doc["memory_bytes"]) is int


def test_usage_json_keeps_its_public_names_in_order() -> None:
    """Scripts read these (`tcl -o json`, /api/v1): add fields freely, never rename one."""
    assert list(usage_json(TaskUsage())) == [
        "cpu_seconds", "cpu_rate", "memory_bytes", "memory_peak_bytes", "memory_anon_bytes", "memory_file_bytes",
        "pids", "sampled_at", "cpu_user_seconds", "cpu_system_seconds", "cpu_user_rate", "cpu_system_rate",
        "cpu_throttled_seconds", "cpu_throttled_periods", "memory_swap_bytes", "io_read_bytes", "io_write_bytes",
        "oom_kills", "pids_max_hits", "net_tx_bytes", "net_rx_bytes", "net_tx_rate", "net_rx_rate"]


def test_task_docs_follow_usage_and_task_changes() -> None:
    spec = JobSpec(command=("x",), resources=Resources.of({"cpu": 1, "memory": 2**30}), tasks=3)
    tasks = [Task("j1", 0, TaskState.RUNNING, node="n1", attempt=1, started_at=5.0),
             Task("j1", 1, TaskState.PENDING), Task("j1", 2, TaskState.SUCCEEDED, node="n1", exit_code=0,
                                                    usage=TaskUsage(cpu_seconds=3.0, sampled_at=9.0))]
    state = MasterState([Job(id="j1", spec=spec, submitted_at=1.0)], tasks,
                        [Node("n1", Resources.of({"cpu": 4, "memory": 8 * 2**30}))], [], Timeouts(), 0.0)
    docs = TaskDocs()

    def reference() -> list[dict]:
        return [task_json(state.task_view(t)) for t in state.tasks["j1"]]
    state.usage["j1.0"] = TaskUsage(cpu_rate=0.5, sampled_at=10.0)
    first = docs.docs(state, state.tasks["j1"])
    assert first == reference()
    assert all(a is b for a, b in zip(docs.docs(state, state.tasks["j1"]), first))   # nothing new: kept
    state.usage["j1.0"] = TaskUsage(cpu_rate=0.75, memory_bytes=7, sampled_at=11.0)      # a heartbeat later
    assert docs.docs(state, state.tasks["j1"]) == reference()
    state.tasks["j1"][0] = replace(tasks[0], state=TaskState.FAILED, exit_code=1, finished_at=12.0,
                                   usage=TaskUsage(cpu_seconds=8.0))
    del state.usage["j1.0"]
    assert docs.docs(state, state.tasks["j1"]) == reference()
