"""Who may use the lifecycle verbs, through a live secure master's gRPC API (README, "Hold,
release, requeue, wait"): the job's owner or an admin may hold, release, requeue and
update it, another user may not, and what an admin held only an admin releases; an update is checked as a submit (a queue that does not
exist, a weight past the queue's cap are refused naming the field)."""

from __future__ import annotations

from pathlib import Path

import grpc

from tcluster.master.identity.accounts import add_user
from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run
from tests.component.test_users_authz import auth, code_of, spec, start_secure

QUEUES = "queues:\n  default: {max_job_weight: 4}\n  other: {}\n"


def test_owner_and_admin_may_change_a_job_and_others_may_not(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        (h.tmp / "queues.yaml").write_text(QUEUES)
        await start_secure(h, queues_file=h.tmp / "queues.yaml")
        data_dir = h.tmp / "master"
        alice = auth(add_user(data_dir, "alice", "nobody", ("default",), admin=False))
        bob = auth(add_user(data_dir, "bob", "nobody", ("*",), admin=False))
        admin = auth(add_user(data_dir, "boss", "nobody", ("*",), admin=True))
        job = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=alice)   # no node: waits
        code, why = await code_of(h.jobs.Hold(jobs_pb2.HoldJobRequest(id=job.id), metadata=bob))
        assert code is grpc.StatusCode.PERMISSION_DENIED and "bob" in why
        held = await h.jobs.Hold(jobs_pb2.HoldJobRequest(id=job.id), metadata=alice)
        assert held.held_by == "alice" and "held by alice" in held.pending_reason
        code, why = await code_of(h.jobs.Release(jobs_pb2.ReleaseJobRequest(id=job.id), metadata=bob))
        assert code is grpc.StatusCode.PERMISSION_DENIED
        assert (await h.jobs.Release(jobs_pb2.ReleaseJobRequest(id=job.id), metadata=admin)).held_by == ""
        await h.jobs.Hold(jobs_pb2.HoldJobRequest(id=job.id), metadata=admin)     # an admin's hold
        code, why = await code_of(h.jobs.Release(jobs_pb2.ReleaseJobRequest(id=job.id), metadata=alice))
        assert code is grpc.StatusCode.PERMISSION_DENIED and "only an admin may release it" in why
        assert (await h.jobs.Release(jobs_pb2.ReleaseJobRequest(id=job.id), metadata=admin)).held_by == ""
        for change, field in (({"queue": "nope"}, "nope"), ({"weight": 9.0}, "max_job_weight"),
                              ({"queue": "other"}, "other")):      # alice's grants: default only
            code, why = await code_of(h.jobs.Update(jobs_pb2.UpdateJobRequest(id=job.id, **change), metadata=alice))
            assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED) and field in why, why
        code, _ = await code_of(h.jobs.Update(jobs_pb2.UpdateJobRequest(id=job.id, cpu=1.0), metadata=bob))
        assert code is grpc.StatusCode.PERMISSION_DENIED
        updated = await h.jobs.Update(jobs_pb2.UpdateJobRequest(id=job.id, cpu=1.0, weight=2.0), metadata=alice)
        assert updated.spec.resources.cpu == 1.0 and updated.spec.weight == 2.0
        code, why = await code_of(h.jobs.Requeue(jobs_pb2.RequeueJobRequest(id=job.id), metadata=alice))
        assert code is grpc.StatusCode.FAILED_PRECONDITION and "nothing to requeue" in why
    run(scenario, tmp_path)
