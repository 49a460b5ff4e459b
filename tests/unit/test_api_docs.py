"""The job API's documents are exactly what `tcl -o json` shows: usage docs what the proto
round trip gives; task docs, kept per task and usage sample, what the shared view gives,
before and after usage and task changes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings

from tcluster.views import task_json, usage_json
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.web.api import TaskDocs, usage_doc
from tcluster.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.resources import Resources
from tcluster.wire import usage_to_pb
from tests.unit.specs import usages


@settings(max_examples=200, deadline=None)
@given(usages)
def test_usage_doc_is_the_proto_round_trip(usage: TaskUsage) -> None:
    assert usage_doc(usage) == usage_json(usage_to_pb(usage))


def test_usage_doc_keeps_proto_types_and_timestamps() -> None:
    usage = TaskUsage(cpu_rate=1, memory_bytes=5, sampled_at=1700000000.9996)   # an int where proto has a double
    doc, reference = usage_doc(usage), usage_json(usage_to_pb(usage))
    assert doc == reference and type(doc["cpu_rate"]) is float and doc["sampled_at"] == reference["sampled_at"]


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
