"""The master and two agents in one process, fake runtime, real gRPC; every scenario
runs on both stores, SQLite and a real etcd (so the two stay equivalent)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from tcluster.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2
from tests.component.harness import Harness, run, wait_until

GiB = 2**30


pytestmark = pytest.mark.usefixtures("store")   # every test on both stores (conftest.py)


def _done(job: jobs_pb2.Job) -> bool:
    return job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


def test_job_runs_to_success_and_failure(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1")
        ok = await h.submit(["true"], tasks=3)
        bad = await h.submit(["false"])
        ok = await h.wait_job(ok.id, _done)
        bad = await h.wait_job(bad.id, _done)
        assert ok.state == jobs_pb2.JOB_SUCCEEDED
        assert [t.state for t in ok.tasks] == [common_pb2.TASK_SUCCEEDED] * 3
        assert all(t.has_exit_code and t.exit_code == 0 and t.node == "n1" for t in ok.tasks)
        assert bad.state == jobs_pb2.JOB_FAILED and bad.tasks[0].exit_code == 1
        assert bad.tasks[0].reason == "exited with code 1"
    run(scenario, tmp_path)


def test_tasks_spread_when_first_node_is_full_and_wait_when_all_are(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        a1 = await h.add_agent("n1", cpus=2)
        a2 = await h.add_agent("n2", cpus=2)
        job = await h.submit(["sleep"], cpu=1, tasks=5)
        job = await h.wait_job(job.id, lambda j: sum(t.state == common_pb2.TASK_RUNNING for t in j.tasks) == 4)
        assert sorted(t.node for t in job.tasks if t.node) == ["n1", "n1", "n2", "n2"]  # first-fit
        pending = [t for t in job.tasks if t.state == common_pb2.TASK_PENDING]
        assert len(pending) == 1 and job.state == jobs_pb2.JOB_RUNNING
        assert "no node has enough cpu right now" in job.pending_reason
        a1.runtime.finish(a1.runtime.running_keys()[0], 0)   # frees a slot: the last task starts
        await h.wait_job(job.id, lambda j: sum(t.state == common_pb2.TASK_RUNNING for t in j.tasks) == 4
                         and not any(t.state == common_pb2.TASK_PENDING for t in j.tasks))
        for runtime in (a1.runtime, a2.runtime):
            for key in runtime.running_keys():
                runtime.finish(key, 0)
        job = await h.wait_job(job.id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED and job.pending_reason == ""
    run(scenario, tmp_path)


def test_request_larger_than_every_node_is_refused(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("small", cpus=2, memory=4 * GiB)
        await h.add_agent("big", cpus=8, memory=16 * GiB)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit(["true"], cpu=1, memory=64 * GiB)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "memory" in info.value.details() and "big" in info.value.details() and "16Gi" in info.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit([], cpu=1)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "command" in info.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.job("nope")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    run(scenario, tmp_path)


def test_cancel_kills_running_and_pending_tasks(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1", cpus=1)
        job = await h.submit(["sleep"], cpu=1, tasks=2)
        await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_RUNNING)
        await h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job.id))
        job = await h.wait_job(job.id, lambda j: all(t.state == common_pb2.TASK_KILLED for t in j.tasks))
        assert job.state == jobs_pb2.JOB_CANCELLED
        assert job.tasks[0].signal == 15 and job.tasks[0].reason == "cancelled"
        assert agent.runtime.running_keys() == []
    run(scenario, tmp_path)


def test_stale_view_launch_is_refused_and_requeued(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1", cpus=2)
        # The agent's own view says it is full: it refuses, the master requeues.
        agent.agent.tasks.state.reserved = agent.agent.tasks.capacity
        job = await h.submit(["true"], cpu=1)
        job = await h.wait_job(job.id, lambda j: "refused" in j.tasks[0].reason)
        assert job.tasks[0].state in (common_pb2.TASK_PENDING, common_pb2.TASK_STARTING)
        agent.agent.tasks.state.reserved = agent.agent.tasks.capacity.times(0)
        job = await h.wait_job(job.id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED and job.tasks[0].attempt >= 2
    run(scenario, tmp_path)


def test_launch_error_fails_the_task_and_agent_keeps_serving(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        agent.runtime.fail_launch = "user 'nobody2' does not exist"
        bad = await h.wait_job((await h.submit(["true"])).id, _done)
        assert bad.state == jobs_pb2.JOB_FAILED and "nobody2" in bad.tasks[0].reason
        good = await h.wait_job((await h.submit(["true"])).id, _done)
        assert good.state == jobs_pb2.JOB_SUCCEEDED
    run(scenario, tmp_path)


def test_master_restart_loses_no_job_and_agents_report_what_ran_meanwhile(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        job = await h.submit(["sleep"], tasks=2)
        queued = await h.submit(["true"], cpu=4)   # fits n1 (4 cpus), but only once it is empty
        await h.wait_job(job.id, lambda j: all(t.state == common_pb2.TASK_RUNNING for t in j.tasks))
        await h.stop_master()
        keys = agent.runtime.running_keys()
        agent.runtime.finish(keys[0], 0)          # ends while the master is away
        await h.start_master()
        await wait_until(lambda: _registered(agent))
        job = await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_SUCCEEDED)
        assert job.tasks[1].state == common_pb2.TASK_RUNNING and job.state == jobs_pb2.JOB_RUNNING
        assert (await h.job(queued.id)).state == jobs_pb2.JOB_PENDING
        agent.runtime.finish(keys[1], 0)
        job = await h.wait_job(job.id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED
    run(scenario, tmp_path)


async def _registered(agent: object) -> bool:
    return agent.agent.registered.is_set()  # type: ignore[attr-defined]


def test_usage_from_heartbeats_reaches_the_job(tmp_path: Path) -> None:
    from tcluster.agent.runtime.base import RawUsage
    import time

    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        job = await h.submit(["sleep"])
        await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_RUNNING)
        key = agent.runtime.running_keys()[0]
        now = time.time()
        agent.runtime.set_usage(key, RawUsage(at=now, mono=100.0, cpu_ns=10**9, memory_bytes=5 * 2**20, memory_peak_bytes=7 * 2**20))
        await wait_until(lambda: _usage_seen(h, job.id))
        agent.runtime.set_usage(key, RawUsage(at=now + 1, mono=101.0, cpu_ns=15 * 10**8, memory_bytes=5 * 2**20))
        job = await h.wait_job(job.id, lambda j: j.tasks[0].usage.cpu_seconds >= 1.5)
        assert job.tasks[0].usage.cpu_rate == pytest.approx(0.5)
        assert job.tasks[0].usage.memory_peak_bytes == 7 * 2**20   # remembered after the kernel value drops
        nodes = await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())
        assert nodes.nodes[0].free.cpu == pytest.approx(3) and nodes.nodes[0].tasks == [job.tasks[0].id]
    run(scenario, tmp_path)


async def _usage_seen(h: Harness, job_id: str) -> bool:
    return (await h.job(job_id)).tasks[0].usage.cpu_seconds > 0


def test_malformed_agent_messages_do_not_crash_the_master(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        stub = agent_pb2_grpc.AgentServiceStub(h.channel)
        call = stub.Connect()
        await call.write(agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat()))   # not Register first
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        call = stub.Connect()
        await call.write(agent_pb2.AgentMessage(register=agent_pb2.Register(node="")))
        with pytest.raises(grpc.aio.AioRpcError):
            await call.read()
        call = stub.Connect()
        zero = agent_pb2.Register(node="empty")         # no capacity: refused
        call = stub.Connect()
        await call.write(agent_pb2.AgentMessage(register=zero))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "capacity" in info.value.details()
        weird = agent_pb2.Register(node="weird")
        weird.capacity.cpu, weird.capacity.memory = 0.01, 2**20   # too small for the job below
        call = stub.Connect()
        await call.write(agent_pb2.AgentMessage(register=weird))
        await call.read()  # Registered
        bogus = agent_pb2.TaskEvent(task_id="x.0", state=99, seq=1)
        await call.write(agent_pb2.AgentMessage(events=agent_pb2.TaskEvents(events=[bogus])))
        await call.write(agent_pb2.AgentMessage())   # no kind at all
        await h.add_agent("n1")
        job = await h.wait_job((await h.submit(["true"])).id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED
        call.cancel()
    run(scenario, tmp_path)


@pytest.mark.parametrize("mutate,fragment", [
    (lambda s: setattr(s.resources, "cpu", float("nan")), "resources.cpu"),
    (lambda s: setattr(s.resources, "cpu", -1.0), "resources.cpu"),
    (lambda s: setattr(s.resources, "memory", -5), "resources.memory"),
    (lambda s: setattr(s, "tasks", -3), "tasks"),
    (lambda s: setattr(s, "tasks", 10**6), "tasks"),
    (lambda s: s.ClearField("command"), "command"),
    (lambda s: s.env.update({"BAD KEY": "1"}), "env"),
    (lambda s: s.resources.other.update({"gpu": float("inf")}), "resources.gpu"),
])
def test_malformed_client_requests_get_invalid_argument_and_change_nothing(tmp_path: Path, mutate, fragment) -> None:  # type: ignore[no-untyped-def]
    async def scenario(h: Harness) -> None:
        await h.start_master()
        spec = jobs_pb2.JobSpec(command=["true"], tasks=1)
        spec.resources.cpu, spec.resources.memory = 1, 2**20
        mutate(spec)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in info.value.details()
        assert (await h.jobs.List(jobs_pb2.ListJobsRequest())).jobs == []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.jobs.List(jobs_pb2.ListJobsRequest(states=[42]))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    run(scenario, tmp_path)


def test_logs_follow_streams_new_output_until_the_task_ends(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        job = await h.submit(["sleep"])
        await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_RUNNING)
        spec = agent.runtime.started[-1]
        Path(spec.stdout_path).write_bytes(b"first\n")
        stream = h.jobs.Logs(jobs_pb2.LogsRequest(job_id=job.id, follow=True))
        got = b""
        async for chunk in stream:
            got += chunk.data
            if got == b"first\n":
                with open(spec.stdout_path, "ab") as f:
                    f.write(b"second\n")
            if b"second\n" in got:
                agent.runtime.finish(spec.key, 0)        # the stream ends after the task does
        assert got == b"first\nsecond\n"
        await h.wait_job(job.id, _done)
    run(scenario, tmp_path)


def test_a_submit_sent_again_with_its_request_id_makes_one_job_across_a_restart(tmp_path: Path) -> None:
    """Proves: a Submit repeated with the same request id (a client's retry after a lost
    reply or a failover) gets the job the first one made, also while the first is still
    being written and after the master restarts from its store; the same id with another
    spec is refused naming the field; other ids make new jobs."""
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1")
        first = await h.submit(["sleep"], request_id="retry-1")
        assert (await h.submit(["sleep"], request_id="retry-1")).id == first.id
        together = await asyncio.gather(*(h.submit(["true"], request_id="retry-2") for _ in range(5)))
        assert len({job.id for job in together}) == 1
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit(["sleep", "1"], request_id="retry-1")
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "request_id 'retry-1'" in info.value.details() and first.id in info.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit(["sleep"], request_id="-bad id")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "request_id" in info.value.details()
        await h.stop_master()
        await h.start_master()
        assert (await h.submit(["sleep"], request_id="retry-1")).id == first.id
        other = await h.submit(["sleep"], request_id="retry-3")
        plain = [await h.submit(["sleep"]) for _ in range(2)]
        listed = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))
        assert sorted(j.id for j in listed.jobs) == sorted({first.id, together[0].id, other.id, *(p.id for p in plain)})
        assert (await h.job(first.id)).spec.request_id == "retry-1"
    run(scenario, tmp_path)
