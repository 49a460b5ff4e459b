"""`tcl why JOB` from the two replies it reads: the wait (placement, then preemption), the
queue's standing, the queues above theirs, and who preempted each task."""

from __future__ import annotations

import pytest

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


def level_of(queue_share: float, alice: float, bob: float, owner: str = "alice") -> str | None:
    """Alice's waiting job in leaf lab.gpu (guaranteed 0.5; its parent lab 1.0), two users."""
    job = jobs_pb2.Job(id="j1", state=jobs_pb2.JOB_PENDING)
    job.spec.queue, job.spec.owner = "lab.gpu", owner
    job.tasks.add(index=0, state=common_pb2.TASK_PENDING)
    queues = jobs_pb2.ListQueuesResponse()
    queues.queues.add(path="lab", guaranteed_share=1.0, dominant_share=queue_share)
    queues.queues.add(path="lab.gpu", parent="lab", leaf=True, guaranteed_share=0.5, dominant_share=queue_share)
    queues.queues.add(path="lab.gpu/alice", parent="lab.gpu", user="alice", dominant_share=alice)
    queues.queues.add(path="lab.gpu/bob", parent="lab.gpu", user="bob", dominant_share=bob)
    held = why_json(job, queues)["held_back_by"]
    return None if held is None else held["level"]


@pytest.mark.parametrize("queue_share, alice, bob, owner, level", [
    (0.5, 0.25, 0.25, "alice", "queue"),   # its leaf holds its guarantee: other queues first
    (0.4, 0.3, 0.1, "alice", "user"),      # alice holds more than half of the leaf's: bob first
    (0.4, 0.3, 0.1, "bob", "job"),         # bob is below his part: his own job's turn or fit
    (0.4, 0.2, 0.2, "carol", "job"),       # no row for her yet (nothing running): not held by a user
])
def test_why_names_the_level_that_holds_a_job_back(queue_share: float, alice: float, bob: float, owner: str,
                                                   level: str) -> None:
    assert level_of(queue_share, alice, bob, owner) == level


def test_a_job_with_nothing_waiting_is_held_back_by_nothing() -> None:
    doc = why_json(*replies())
    assert doc["held_back_by"] == {"level": "job", "why": doc["held_back_by"]["why"]}
    job, queues = replies()
    del job.tasks[0]
    assert why_json(job, queues)["held_back_by"] is None
    assert "held back" not in why_text(why_json(job, queues))
