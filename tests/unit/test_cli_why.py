"""`tcl why JOB` from the two replies it reads: the wait (placement, then preemption), the
queue's standing, the queues above theirs, and who preempted each task."""

from __future__ import annotations

from tcluster.cli.why import why_json, why_text
from tcluster.v1 import common_pb2, jobs_pb2


def replies() -> tuple[jobs_pb2.Job, jobs_pb2.ListQueuesResponse]:
    job = jobs_pb2.Job(id="b0000001", pending_reason="no node has enough cpu right now; queue b below its share "
                                                     "(0.00 < 0.50): reclaim from queues above their share starts in 12s")
    job.spec.queue = "b"
    job.state = jobs_pb2.JOB_RUNNING
    job.tasks.add(index=0, state=common_pb2.TASK_PENDING, preemptions=1,
                  reason="attempt 1 Preempted by job c0000002 (queue c below its share: 0.10 < 0.30); requeued")
    job.tasks.add(index=1, state=common_pb2.TASK_RUNNING)
    queues = jobs_pb2.ListQueuesResponse()
    queues.queues.add(path="a", leaf=True, guaranteed_share=0.5, dominant_share=0.9)
    queues.queues.add(path="b", leaf=True, guaranteed_share=0.5, dominant_share=0.1)
    return job, queues


def test_why_gathers_the_wait_the_standing_and_the_preemptions() -> None:
    doc = why_json(*replies())
    assert (doc["state"], doc["running_tasks"], doc["pending_tasks"]) == ("RUNNING", 1, 1)
    assert (doc["queue_share"], doc["queue_guaranteed_share"]) == (0.1, 0.5)
    assert doc["queues_above_their_share"] == [{"queue": "a", "share": 0.9, "guaranteed_share": 0.5}]
    assert doc["preempted"][0]["task"] == 0 and "Preempted by job c0000002" in doc["preempted"][0]["reason"]
    text = why_text(doc)
    assert "waits: no node has enough cpu right now; queue b below its share (0.00 < 0.50)" in text
    assert "queues above their guaranteed share: a (0.90 > 0.50)" in text
    assert "task 0 was preempted 1 time(s), now PENDING: attempt 1 Preempted by job c0000002" in text
