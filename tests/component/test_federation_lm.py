"""The LM service of a live master (issue 25), driven through gRPC as a GM would: an
in-process master with --federation-lm-id and fake-runtime agents."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.component.harness import Harness, run, wait_until
from tcluster.master.core.pinning import FEDERATION_OWNER
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2

LM = dict(federation_lm_id=3, federation_lm_name="east", federation_gms=2, federation_state_interval_s=0.3)
GIB = 2**30


def stub(h: Harness) -> federation_pb2_grpc.LocalManagerServiceStub:
    return federation_pb2_grpc.LocalManagerServiceStub(h.channel)


async def cluster(h: Harness) -> None:
    await h.start_master(**LM)
    # n0 is GM 0's partition (interleaved split over the names in order), n1 GM 1's.
    await h.add_agent("n0", cpus=4, memory=8 * GIB, labels={"rack": "r1"})
    await h.add_agent("n1", cpus=4, memory=8 * GIB)


async def next_update(stream: Any, kind: str, timeout_s: float = 10.0) -> Any:
    """The next update of this kind on a Subscribe stream (others are skipped)."""
    async def read() -> Any:
        while True:
            update = await stream.read()
            assert update is not grpc.aio.EOF, "the stream ended"
            if update.WhichOneof("kind") == kind:
                return getattr(update, kind)
    return await asyncio.wait_for(read(), timeout_s)


def request(rid: str, task_id: str, gm: int, epoch: int, node: int, cpu_m: int = 1000, mem_mib: int = 1024,
            how: str = "launch", src: int = 0, victims: tuple[str, ...] = (), pc: int = 0) -> fpb.PlaceRequest:
    spec = jobs_pb2.JobSpec(command=["sleep", "100"])
    task = fpb.FedTask(task_id=task_id, queue="a", req=fpb.Res(v=[cpu_m, mem_mib]), pc=pc, spec=spec)
    msg = fpb.PlaceRequest(request_id=rid, gm=gm, epoch=epoch, node=node, task=task)
    if how == "launch":
        msg.launch.SetInParent()
    elif how == "repartition":
        msg.repartition.src = src
    else:
        msg.preempt.victims.extend(victims)
    return msg


async def layout(h: Harness, gm: int = 0) -> tuple[Any, fpb.LMLayout, fpb.LMState]:
    stream = stub(h).Subscribe(fpb.SubscribeRequest(gm=gm, gm_name=f"gm{gm}"))
    first, then = await stream.read(), await stream.read()      # the layout first, then the state
    assert (first.WhichOneof("kind"), then.WhichOneof("kind")) == ("layout", "state")
    return stream, first.layout, then.state


def started_on(h: Harness, node: str) -> int:
    return len(h.agents[node].runtime.started)


def test_subscribe_gives_the_layout_then_the_state(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, state = await layout(h)
        assert (lay.lm, lay.name, lay.gms) == (3, "east", 2)
        assert [n.name for n in lay.nodes] == ["n0", "n1"] and [n.owner for n in lay.nodes] == [0, 1]
        assert list(lay.constraints) == ["rack=r1"] and [n.cmask for n in lay.nodes] == [1, 0]
        assert lay.nodes[0].cap.v[0] > 0 and lay.epoch > 0
        assert state.epoch == lay.epoch and len(state.free) == 2 and list(state.free[0].v) == list(lay.nodes[0].cap.v)
        again = await next_update(stream, "state")        # every interval, a full state again
        assert again.version >= state.version
        stream.cancel()
    run(scenario, tmp_path)


def test_a_launch_runs_pinned_once_and_its_end_reaches_the_gm(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        answer = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0, pc=1))
        assert answer.WhichOneof("outcome") == "launched" and answer.launched.node == 0
        job_id = answer.launched.job_id
        job = await h.wait_job(job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert job.tasks[0].node == "n0" and dict(job.spec.labels)["tcluster.io/federation-task"] == "f0-1.0"
        assert answer.state.free[0].v[0] == lay.nodes[0].cap.v[0] - 1000    # the answer's state has it taken
        assert [(t.task_id, t.queue, t.node, list(t.req.v)) for t in answer.state.tasks] == [("f0-1.0", "a", 0,
                                                                                             [1000, 1024])]
        assert [(u.queue, list(u.used.v)) for u in answer.state.usage] == [("a", [1000, 1024])]
        again = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0, pc=1))
        assert again.launched.job_id == job_id and again.launched.node == 0
        assert started_on(h, "n0") == 1 and started_on(h, "n1") == 0
        key = h.agents["n0"].runtime.started[0].key
        h.agents["n0"].runtime.finish(key, 0)
        ended = await next_update(stream, "ended")
        assert (ended.task_id, ended.node, ended.state, ended.preempted) == ("f0-1.0", 0, common_pb2.TASK_SUCCEEDED,
                                                                             False)
        assert list(ended.node_free.v) == list(lay.nodes[0].cap.v)
        stream.cancel()
    run(scenario, tmp_path)


def test_the_check_table_live(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        lm = stub(h)
        stale = await lm.Place(request("a:0", "f0-1.0", 0, lay.epoch - 1, 0))
        assert stale.WhichOneof("outcome") == "refused" and stale.refused.epoch == lay.epoch
        other = await lm.Place(request("b:0", "f0-2.0", 0, lay.epoch, 1))
        assert other.WhichOneof("outcome") == "inconsistent"
        assert (other.inconsistent.kind, other.inconsistent.why) == (fpb.INCONSISTENCY_INTERNAL,
                                                                     fpb.WHY_NOT_IN_PARTITION)
        unmet = await lm.Place(request("c:0", "f0-3.0", 1, lay.epoch, 1, pc=1))   # n1 has no rack=r1
        assert unmet.inconsistent.why == fpb.WHY_INSUFFICIENT
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await lm.Place(request("d:0", "f0-4.0", 5, lay.epoch, 0))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "gm" in bad.value.details()
        assert started_on(h, "n0") == started_on(h, "n1") == 0
        stream.cancel()
    run(scenario, tmp_path)


def test_a_node_filled_by_a_local_job_is_insufficient_the_real_state_wins(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        cap = list(lay.nodes[0].cap.v)
        local = await h.submit(["sleep"], cpu=cap[0] / 1000, memory=2**20, constraints=["rack=r1"])
        await h.wait_job(local.id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        answer = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0, cpu_m=500))
        assert answer.WhichOneof("outcome") == "inconsistent"
        assert (answer.inconsistent.kind, answer.inconsistent.why) == (fpb.INCONSISTENCY_INTERNAL,
                                                                       fpb.WHY_INSUFFICIENT)
        assert answer.state.free[0].v[0] == 0 and started_on(h, "n0") == 1      # the local job only
        stream.cancel()
    run(scenario, tmp_path)


def test_a_repartition_launches_on_a_logical_node(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        answer = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 1, how="repartition", src=1))
        assert answer.WhichOneof("outcome") == "launched" and answer.launched.logical
        assert [(n.phys, n.owner, n.task_id) for n in answer.state.logical] == [(1, 0, "f0-1.0")]
        job = await h.wait_job(answer.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert job.tasks[0].node == "n1"
        wrong = await stub(h).Place(request("f0-2.0:0", "f0-2.0", 0, lay.epoch, 0, how="repartition", src=1))
        assert (wrong.inconsistent.kind, wrong.inconsistent.why) == (fpb.INCONSISTENCY_EXTERNAL,
                                                                     fpb.WHY_NOT_IN_PARTITION)
        stream.cancel()
    run(scenario, tmp_path)


def test_a_preemption_stops_the_victim_and_tells_its_gm(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream1, lay, _ = await layout(h, gm=1)
        cap = list(lay.nodes[1].cap.v)
        victim = await stub(h).Place(request("f1-1.0:0", "f1-1.0", 1, lay.epoch, 1, cpu_m=cap[0], mem_mib=1024))
        assert victim.WhichOneof("outcome") == "launched"
        await h.wait_job(victim.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        answer = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 1, cpu_m=cap[0], how="preempt",
                                             victims=("f1-1.0",)))
        assert answer.WhichOneof("outcome") == "launched" and list(answer.launched.preempted) == ["f1-1.0"]
        ended = await next_update(stream1, "ended")
        assert ended.task_id == "f1-1.0" and ended.preempted
        await h.wait_job(victim.launched.job_id, lambda j: j.tasks[0].state == common_pb2.TASK_KILLED)
        job = await h.wait_job(answer.launched.job_id,
                               lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert job.tasks[0].node == "n1"
        stream1.cancel()
    run(scenario, tmp_path)


def test_a_victim_stops_through_the_preemption_path_and_one_already_gone_is_victim_gone(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream1, lay, _ = await layout(h, gm=1)
        cap = list(lay.nodes[1].cap.v)
        victim = await stub(h).Place(request("f1-1.0:0", "f1-1.0", 1, lay.epoch, 1, cpu_m=cap[0]))
        await h.wait_job(victim.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        answer = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 1, cpu_m=cap[0], how="preempt",
                                             victims=("f1-1.0",)))
        ended = await next_update(stream1, "ended")
        assert (ended.task_id, ended.preempted, ended.state, ended.job_id) == (
            "f1-1.0", True, common_pb2.TASK_KILLED, victim.launched.job_id)
        assert ended.reason == "preempted by f0-1.0 of queue a"
        job = await h.wait_job(victim.launched.job_id, lambda j: j.state == jobs_pb2.JOB_CANCELLED)
        assert job.tasks[0].reason.startswith("preempted by f0-1.0 of queue a")     # the preemption path's
        await h.wait_job(answer.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        # f1-1.0 is gone now: a preemption naming it stops nothing and launches nothing.
        again = await stub(h).Place(request("f0-2.0:0", "f0-2.0", 0, lay.epoch, 1, cpu_m=cap[0], how="preempt",
                                            victims=("f1-1.0",)))
        assert again.WhichOneof("outcome") == "inconsistent" and again.inconsistent.why == fpb.WHY_VICTIM_GONE
        assert started_on(h, "n1") == 2
        stream1.cancel()
    run(scenario, tmp_path)


def test_after_a_master_restart_a_repeated_request_id_returns_the_same_job(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        first = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))
        await h.wait_job(first.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        stream.cancel()
        await h.stop_master()
        await h.start_master(**LM)
        await wait_until(lambda: _connected(h, 2))
        again = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))   # the old epoch, even
        assert again.WhichOneof("outcome") == "launched" and again.launched.job_id == first.launched.job_id
        stream, lay2, state = await layout(h)
        assert lay2.epoch > lay.epoch                      # a new leader's epoch
        assert state.free[0].v[0] == lay.nodes[0].cap.v[0] - 1000    # the task it rebuilt still holds n0
        assert started_on(h, "n0") == 1
        stream.cancel()
    run(scenario, tmp_path)


async def _connected(h: Harness, count: int) -> bool:
    nodes = (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())).nodes
    return sum(n.state == "READY" for n in nodes) >= count


def test_a_user_job_may_not_carry_tcluster_labels(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        spec = jobs_pb2.JobSpec(command=["sleep"], labels={"tcluster.io/pin-node": "n0"})
        spec.resources.cpu, spec.resources.memory = 1, GIB
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "labels" in refused.value.details() and "tcluster.io/" in refused.value.details()
    run(scenario, tmp_path)


def test_a_master_without_the_flag_says_so(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub(h).Place(request("a:0", "f0-1.0", 0, 1, 0))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "--federation-lm-id" in refused.value.details()
    run(scenario, tmp_path)


def test_two_copies_of_one_request_at_once_make_one_job(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h)
        a, b = await asyncio.gather(*(stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))
                                      for _ in range(2)))
        assert a.launched.job_id and a.launched.job_id == b.launched.job_id
        await h.wait_job(a.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert started_on(h, "n0") == 1
        stream.cancel()
    run(scenario, tmp_path)


def test_a_new_node_is_a_new_epoch_on_every_stream(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h, gm=1)
        await h.add_agent("n2", cpus=2, memory=4 * GIB)
        new = await next_update(stream, "layout")
        assert new.epoch > lay.epoch and [n.name for n in new.nodes] == ["n0", "n1", "n2"]
        old = await stub(h).Place(request("f1-1.0:0", "f1-1.0", 1, lay.epoch, 1))
        assert old.WhichOneof("outcome") == "refused" and old.refused.epoch == new.epoch
        stream.cancel()
    run(scenario, tmp_path)


def test_on_a_secure_master_only_an_admin_token_may_act_as_a_gm(tmp_path: Path) -> None:
    from tcluster.master.identity.accounts import add_user, bootstrap_admin
    from tests.component.test_users_authz import auth, code_of, join_agent, start_secure

    async def scenario(h: Harness) -> None:
        await start_secure(h, **LM)
        admin = bootstrap_admin(h.tmp / "master")
        alice = add_user(h.tmp / "master", "alice", "nobody", ("*",), admin=False)
        await join_agent(h, "n0")
        lm = stub(h)
        assert (await code_of(lm.Place(request("a:0", "f0-1.0", 0, 1, 0))))[0] == grpc.StatusCode.UNAUTHENTICATED
        code, details = await code_of(lm.Place(request("a:0", "f0-1.0", 0, 1, 0), metadata=auth(alice)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in details
        stream = lm.Subscribe(fpb.SubscribeRequest(gm=0), metadata=auth(admin))
        lay = await next_update(stream, "layout")
        alone = await code_of(lm.Place(request("a:0", "f0-1.0", 0, lay.epoch, 0), metadata=auth(admin)))
        assert alone[0] == grpc.StatusCode.PERMISSION_DENIED and "names no user" in alone[1]   # issue 35
        placed = request("a:0", "f0-1.0", 0, lay.epoch, 0)
        placed.user_token = alice            # the submitting user's token: the LM runs it as alice's mapping
        answer = await lm.Place(placed, metadata=auth(admin))
        assert answer.WhichOneof("outcome") == "launched"
        assert h.master is not None and h.master.service.get(answer.launched.job_id)[0].spec.user == "nobody"
        stream.cancel()
    run(scenario, tmp_path)


def test_a_late_repeat_after_the_job_left_memory_still_gets_that_job(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(**LM, resident_finished_jobs=0)
        await h.add_agent("n0", cpus=4, memory=8 * GIB)
        stream, lay, _ = await layout(h)
        first = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))
        job_id = first.launched.job_id
        await h.wait_job(job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        h.agents["n0"].runtime.finish(h.agents["n0"].runtime.started[0].key, 0)
        await next_update(stream, "ended")
        service = h.master.service
        await wait_until(lambda: _gone(service, job_id))
        again = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))
        assert again.launched.job_id == job_id and started_on(h, "n0") == 1
        stream.cancel()
    run(scenario, tmp_path)


async def _gone(service: Any, job_id: str) -> bool:
    return job_id not in service.state.jobs and (FEDERATION_OWNER, "f0-1.0:0") not in service.state.by_request


def test_a_cordoned_node_offers_no_room_and_a_failed_task_ends_failed_on_the_stream(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await cluster(h)
        stream, lay, _ = await layout(h, gm=1)
        await h.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="cordon", nodes=["n1"]))
        refused = await stub(h).Place(request("f1-1.0:0", "f1-1.0", 1, lay.epoch, 1))
        assert refused.inconsistent.why == fpb.WHY_INSUFFICIENT and list(refused.state.free[1].v) == [0, 0]
        await h.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="uncordon", nodes=["n1"]))
        answer = await stub(h).Place(request("f1-1.0:1", "f1-1.0", 1, lay.epoch, 1))
        await h.wait_job(answer.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        h.agents["n1"].runtime.finish(h.agents["n1"].runtime.started[0].key, 3)
        ended = await next_update(stream, "ended")
        assert (ended.task_id, ended.state, ended.exit_code) == ("f1-1.0", common_pb2.TASK_FAILED, 3)
        stream.cancel()
    run(scenario, tmp_path)


def test_the_masters_own_preemption_never_picks_a_federated_task(tmp_path: Path) -> None:
    queues = tmp_path / "q.yaml"
    queues.write_text("queues:\n  a: {weight: 1}\n  b: {weight: 1}\n")

    async def scenario(h: Harness) -> None:
        await h.start_master(**{**LM, "federation_gms": 1}, queues_file=queues, preemption=True,
                             preempt_after_s=0.2, preempt_grace_s=0.2, preempt_min_runtime_s=0)
        await h.add_agent("n0", cpus=2, memory=8 * GIB)
        stream, lay, _ = await layout(h)
        spec = jobs_pb2.JobSpec(command=["sleep"], queue="a")
        spec.resources.cpu, spec.resources.memory = 1, GIB
        local = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        await h.wait_job(local.id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        fed = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))   # queue a, younger
        await h.wait_job(fed.launched.job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        spec.queue = "b"
        other = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))      # b is below its share: it reclaims
        await h.wait_job(other.id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert (await h.job(fed.launched.job_id)).tasks[0].state == common_pb2.TASK_RUNNING
        assert (await h.job(local.id)).tasks[0].preemptions == 1
        stream.cancel()
    run(scenario, tmp_path)


def test_a_standby_master_answers_unavailable_with_the_leader(tmp_path: Path) -> None:
    from tcluster.master.edge.federation_api import LocalManagerServicer
    from tcluster.master.store.standby import LEADER_METADATA, StandbyInterceptor
    from tests.component.test_standby import LEADER, FlipView

    async def scenario() -> None:
        server = grpc.aio.server(interceptors=[StandbyInterceptor(FlipView(False, LEADER), "client")])
        federation_pb2_grpc.add_LocalManagerServiceServicer_to_server(LocalManagerServicer(None), server)  # type: ignore[arg-type]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                lm = federation_pb2_grpc.LocalManagerServiceStub(channel)
                for call in (lm.Place(request("a:0", "f0-1.0", 0, 1, 0)),
                             lm.Subscribe(fpb.SubscribeRequest(gm=0)).read()):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await call
                    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                    trailing = dict(refused.value.trailing_metadata() or ())
                    assert trailing.get(LEADER_METADATA) == LEADER.client
        finally:
            await server.stop(0)
    asyncio.run(scenario())
