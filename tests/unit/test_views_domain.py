"""`tcl -o json` and the dashboard build job, task, node and queue JSON with the same views from
domain values: the CLI's path through the reply's protobuf gives the very same text."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from tcluster.cli.queuetree import reply_queues_json
from tcluster.cli.replies import reply_job_json, reply_node_json
from tcluster.domain.model import Job, JobSpec, JobState, Node, Task, TaskState, TaskUsage
from tcluster.views.queuerow import QueueRow
from tcluster.domain.resources import Resources
from tcluster.v1 import jobs_pb2
from tcluster.views.render import job_json, node_json, queues_json, task_json
from tcluster.wire.protobuf import job_to_pb, node_to_pb, queue_to_pb, resources_to_pb
from tests.unit.specs import job_specs, usages

# The key order `-o json` has always printed: scripts may diff it.
JOB_KEYS = [
    "id", "name", "queue", "state", "submitted_at", "finished_at", "resources", "command", "env", "user", "owner",
    "request_id", "workdir", "submit_dir", "labels", "constraints", "weight", "dominant_share", "cpu_limit", "swap", "pids_max",
    "retries", "image", "network", "net_limit", "log_max_bytes", "time_limit_s", "array", "dependency", "keep_unmet", "gang", "gang_timeout_s",
    "gang_restart", "on_preempt", "stdout_file", "stderr_file", "open_mode", "script", "tasks_total",
    "pending_reason", "reason", "held_by", "tasks",
]


@settings(max_examples=100, deadline=None)
@given(job_specs, usages, st.sampled_from(list(JobState)), st.floats(0, 1), st.one_of(st.none(), st.integers(-1, 3)))
def test_the_cli_and_the_dashboard_print_the_same_job(spec, usage, state, share, lotes_class) -> None:
    job = Job("abcd0123", spec, 1795341600.123, state=state, finished_at=1795341700.5, pending_reason="why")
    tasks = [Task("abcd0123", 0, TaskState.RUNNING, node="n1", attempt=1, started_at=5.5, usage=usage),
             Task("abcd0123", 1, TaskState.FAILED, exit_code=3, signal=9, reason="r", failures=2)]
    direct = job_json(job, [task_json(t, lotes_class) for t in tasks], share)
    array_keys = ["pending_indexes", "skipped_indexes", "throttle"] if spec.array else []
    assert list(direct) == [*JOB_KEYS[:-1], *array_keys, "tasks"]
    assert json.dumps(reply_job_json(job_to_pb(job, tasks, share, lotes_class))) == json.dumps(direct)


def test_the_cli_and_the_dashboard_print_the_same_node() -> None:
    node = Node("n1", Resources.of({"cpu": 4, "memory": 2**33, "gpu": 2}), Resources(0.5, 2**20), (("z", "a"),),
                last_seen=7.25)
    free = Resources.of({"cpu": 5, "memory": 2**30})         # more than capacity: used clamps at 0
    direct = node_json(node, free, ["abcd0123.0"])
    assert direct["used"] == {"cpu": 0.0, "memory": 2**33 - 2**30, "gpu": 2.0}
    assert json.dumps(reply_node_json(node_to_pb(node, free, ["abcd0123.0"]))) == json.dumps(direct)


def test_whole_numbers_of_double_fields_stay_floats() -> None:
    spec = JobSpec(("true",), Resources(1, 1), weight=2, cpu_limit=1)      # ints where the proto has doubles
    doc = job_json(Job("abcd0123", spec, 1.0), [])
    assert json.dumps([doc["weight"], doc["cpu_limit"], doc["net_limit"], doc["resources"]["cpu"]]) == \
        "[2.0, 1.0, 0.0, 1.0]"
    assert task_json(Task("abcd0123", 0, usage=TaskUsage()))["usage"]["cpu_rate"] == 0.0


def test_the_cli_and_the_dashboard_print_the_same_queues() -> None:
    rows = [QueueRow("", "root", "", 0, False, 1, 1.0, 0.25, Resources(1, 2), 1, 0, 1, 0),      # the root: left out
            QueueRow("ads", "ads", "", 1, True, 2, 0.5, 0.25, Resources.of({"cpu": 1, "memory": 2, "gpu": 1}), 1, 3, 1, 2)]
    capacity = Resources(4, 2**30)
    direct = queues_json(rows, "hdrf", "queues.yaml", capacity)
    assert [q["path"] for q in direct["queues"]] == ["ads"] and direct["queues"][0]["weight"] == 2.0
    reply = jobs_pb2.ListQueuesResponse(queues=[queue_to_pb(r) for r in rows], fairness="hdrf", source="queues.yaml",
                                        capacity=resources_to_pb(capacity))
    assert json.dumps(reply_queues_json(reply)) == json.dumps(direct)
