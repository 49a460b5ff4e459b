"""Two tcl-gm daemons on a real etcd (--etcd) against a real master as their LM (in process,
FakeRuntime agents): both register and read the queue map from etcd; a GM that dies without
a word (its lease left to expire) has its queue taken over by the other within TTL + slack,
and the work submitted there runs; the dead GM back on its state dir finishes the jobs it
had acknowledged (nothing launched twice) and takes its queue back; a GM whose lease is
not surely alive accepts no Submit; one whose lease etcd dropped registers again."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import grpc

from tests.component.harness import Harness, run, wait_until
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.fedetcd import set_queues, etcd_url
from tcluster.gm.settings import settings_from
from tcluster.etcd.kv import EtcdKV
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401  (the fixture)

TTL_S = 2
TAKEOVER_WAIT_S = TTL_S + 8.0       # the lease's TTL plus etcd's expiry sweep and a watch round-trip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fed:
    def __init__(self, h: Harness, tmp: Path, etcd: SingleEtcd) -> None:
        self.h, self.tmp, self.etcd = h, tmp, etcd
        self.prefix = f"/gm-{uuid.uuid4().hex[:8]}"
        self.ports = [_free_port(), _free_port()]

    async def start(self, i: int) -> GMDaemon:
        gms = ",".join(f"gm{j}=127.0.0.1:{p}" for j, p in enumerate(self.ports))
        gm = GMDaemon(settings_from(dict(
            name=f"gm{i}", index=i, listen=f"127.0.0.1:{self.ports[i]}", state_dir=str(self.tmp / f"gm{i}"),
            lms=f"lm0={self.h.address}", gms=gms, queue_map="a=gm0,b=gm1", etcd=self.etcd.endpoint,
            etcd_prefix=self.prefix, member_ttl_s=TTL_S)))
        await gm.start()
        return gm

    def stub(self, gm: GMDaemon, i: int) -> federation_pb2_grpc.GlobalManagerServiceStub:
        return federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{self.ports[i]}"))


def _spec(queue: str, tasks: int) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(queue=queue, tasks=tasks, command=["sleep"],
                            resources=common_pb2.Resources(cpu=1, memory=2**28))


async def _states(stub, job_id: str, tolerate: bool = False) -> list[str]:
    try:
        return [t.state for t in (await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)).tasks]
    except grpc.aio.AioRpcError as e:
        if tolerate and e.code() == grpc.StatusCode.UNAVAILABLE:
            return []
        raise


def test_a_dead_gms_queue_is_taken_over_and_its_acknowledged_jobs_finish_when_it_returns(
        tmp_path: Path, single_etcd: SingleEtcd) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(federation_lm_id=0, federation_gms=2, federation_state_interval_s=0.3)
        agent = await h.add_agent("n1", cpus=8)
        fed = Fed(h, tmp_path, single_etcd)
        gm0, gm1 = await fed.start(0), await fed.start(1)
        s0, s1 = fed.stub(gm0, 0), fed.stub(gm1, 1)
        try:
            async def both_alive() -> bool:
                st = await s1.Status(fpb.FedStatusRequest(), timeout=10)
                return [(g.name, g.alive, list(g.queues)) for g in st.members] == [("gm0", True, ["a"]),
                                                                                     ("gm1", True, ["b"])]
            await wait_until(both_alive)
            assert (await s1.Status(fpb.FedStatusRequest(), timeout=10)).membership.startswith("etcd ")
            assert await set_queues(etcd_url(single_etcd.endpoint), fed.prefix, {}, []) == {"a": "gm0", "b": "gm1"}

            await set_queues(etcd_url(single_etcd.endpoint), fed.prefix, {"c": "gm1"}, [])   # `tcl-gm queues set`

            async def c_routed() -> str:
                try:
                    return (await s0.Submit(fpb.FedSubmitRequest(spec=_spec("c", 1)), timeout=10)).gm
                except grpc.aio.AioRpcError as e:       # until gm0's watch has the new queue
                    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
                    return ""
            assert await wait_until(c_routed) == "gm1"

            first = await s1.Submit(fpb.FedSubmitRequest(spec=_spec("a", 2)), timeout=10)   # forwarded to gm0
            assert first.gm == "gm0"
            await wait_until(lambda: _running(s0, first.id, 2))

            gm0.membership.revoke_on_stop = False      # dies without a word: etcd finds out by the TTL
            await gm0.stop()

            async def taken_over() -> fpb.FedJob | None:
                try:
                    return await s1.Submit(fpb.FedSubmitRequest(spec=_spec("a", 1)), timeout=10)
                except grpc.aio.AioRpcError as e:
                    assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
                    return None
            second = await wait_until(taken_over, TAKEOVER_WAIT_S)
            assert second.gm == "gm1"
            await wait_until(lambda: _running(s1, second.id, 1))
            st = await s1.Status(fpb.FedStatusRequest(), timeout=10)
            assert [(g.name, g.alive, list(g.taken_over)) for g in st.members] == [("gm0", False, []),
                                                                                     ("gm1", True, ["a"])]
            assert [(g.name, list(g.queues), list(g.taken_over)) for g in st.gms] == [("gm1", ["a", "b", "c"], ["a"])]

            gm1.membership.deadline = 0.0              # as if its keepalives stopped reaching etcd
            try:
                await s1.Submit(fpb.FedSubmitRequest(spec=_spec("b", 1)), timeout=10)
                raise AssertionError("a GM without a live lease accepted a Submit")
            except grpc.aio.AioRpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE and "lease" in (e.details() or "")

            for key in agent.runtime.running_keys():   # every task placed so far ends
                agent.runtime.finish(key, 0)
            gm0 = await fed.start(0)                   # back on its state dir
            s0 = fed.stub(gm0, 0)

            async def done() -> bool:     # (its port may still be in the channel's reconnect backoff)
                return (await _states(s0, first.id, tolerate=True) == ["SUCCEEDED"] * 2
                        and await _states(s1, second.id) == ["SUCCEEDED"])
            # The ends travel agent -> master -> the LM's state -> each GM (gm0's by lookup, as it was
            # down): several rounds, each slower on a loaded host; one fresh-clone run beside the VM
            # image build missed the 10 s default.
            await wait_until(done, 30)

            async def home_again() -> bool:
                try:
                    return (await s1.Submit(fpb.FedSubmitRequest(spec=_spec("a", 1)), timeout=10)).gm == "gm0"
                except grpc.aio.AioRpcError:
                    return False
            await wait_until(home_again, TAKEOVER_WAIT_S)
            launched = (await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))).jobs
            ids = [j.spec.labels.get("tcluster.io/federation-task", "") for j in launched]
            assert len(ids) == len(set(ids)), f"a task was launched twice: {sorted(ids)}"
        finally:
            for gm in (gm0, gm1):
                await gm.stop()
    run(scenario, tmp_path)


async def _running(stub, job_id: str, n: int) -> bool:
    return await _states(stub, job_id) == ["RUNNING"] * n


def test_a_gm_whose_lease_is_revoked_registers_again_and_serves_its_queue(tmp_path: Path,
                                                                          single_etcd: SingleEtcd) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(federation_lm_id=0, federation_gms=2, federation_state_interval_s=0.3)
        fed = Fed(h, tmp_path, single_etcd)
        gm1 = await fed.start(1)
        try:
            old = gm1.membership.lease
            kv = EtcdKV([single_etcd.endpoint])
            try:
                await kv.revoke(old)           # etcd forgets it (as after a partition longer than the TTL)
            finally:
                await kv.close()

            async def back() -> bool:
                m = gm1.membership
                return m.lease not in (0, old) and m.serving() and "gm1" in m.facts().alive
            await wait_until(back, TAKEOVER_WAIT_S)
            st = await fed.stub(gm1, 1).Status(fpb.FedStatusRequest(), timeout=10)
            assert [(g.name, g.alive, list(g.queues)) for g in st.members] == [("gm0", False, []),
                                                                                 ("gm1", True, ["a", "b"])]
        finally:
            await gm1.stop()
    run(scenario, tmp_path)


def test_revoking_a_lease_etcd_no_longer_knows_is_not_an_error(single_etcd: SingleEtcd) -> None:
    # A GM's or a master's stop revokes its lease; one that expired while the process was
    # stopped or cut off is answered NOT_FOUND, which used to escape and skip the rest of the stop.
    async def main() -> None:
        kv = EtcdKV([single_etcd.endpoint])
        try:
            lease = await kv.grant(30)
            await kv.revoke(lease)
            await kv.revoke(lease)
        finally:
            await kv.close()
    asyncio.run(main())
