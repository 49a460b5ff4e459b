"""The live LM's Place (issue 25) beside a plain Submit on the same in-process master:
one GM's sequential Launches (check against the real state, a pinned one-task job
written durably, the answer with the full state) against JobService.Submit of one-task
jobs (written durably, placed by the next fairness round). Side by side in one run:

    python -m bench.fed_lm_place                   # 40 fake agents, 400 requests each
    python -m bench.fed_lm_place --nodes 200 --requests 1000"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.agent.daemon import Agent
from tcluster.agent.settings import AgentSettings
from tcluster.master.app.server import start_master
from tcluster.master.settings import MasterSettings
from tcluster.v1 import federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from testkit.fake_runtime import FakeRuntime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(tmp: Path, nodes: int, requests: int) -> tuple[list[float], list[float]]:
    settings = MasterSettings(listen="127.0.0.1:0", data_dir=tmp / "master", heartbeat_interval_s=1.0,
                              federation_lm_id=0, federation_gms=1, federation_state_interval_s=60)
    master = await start_master(settings)
    agents: list[asyncio.Task[None]] = []
    try:
        for i in range(nodes):
            agent = Agent(AgentSettings(master=f"127.0.0.1:{master.port}", node=f"n{i:04d}", cpus=64,
                                        memory_bytes=256 * 2**30, state_dir=tmp / "agents" / str(i),
                                        heartbeat_interval_s=1.0), FakeRuntime())
            agents.append(asyncio.create_task(agent.run()))
            await asyncio.wait_for(agent.registered.wait(), 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{master.port}") as channel:
            return await _requests(channel, nodes, requests)
    finally:
        for task in agents:
            task.cancel()
        await master.stop(grace_s=0)


async def _requests(channel: grpc.aio.Channel, nodes: int, requests: int) -> tuple[list[float], list[float]]:
    lm = federation_pb2_grpc.LocalManagerServiceStub(channel)
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    stream = lm.Subscribe(fpb.SubscribeRequest(gm=0, gm_name="bench"))
    layout = (await stream.read()).layout
    place, submit = [], []
    for k in range(requests):
        task = fpb.FedTask(task_id=f"f0-1.{k}", queue="a", req=fpb.Res(v=[100, 64]),
                           spec=jobs_pb2.JobSpec(command=["sleep"]))
        msg = fpb.PlaceRequest(request_id=f"f0-1.{k}:0", gm=0, epoch=layout.epoch, node=k % nodes, task=task)
        msg.launch.SetInParent()
        started = time.perf_counter()
        answer = await lm.Place(msg)
        place.append(time.perf_counter() - started)
        assert answer.WhichOneof("outcome") == "launched", answer.WhichOneof("outcome")
        spec = jobs_pb2.JobSpec(command=["sleep"])
        spec.resources.cpu, spec.resources.memory = 0.1, 64 * 2**20
        started = time.perf_counter()
        await jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        submit.append(time.perf_counter() - started)
    stream.cancel()
    return place, submit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=40)
    p.add_argument("--requests", type=int, default=400)
    args = parse_quick(p, {"nodes": 4, "requests": 20})
    with tempfile.TemporaryDirectory() as tmp:
        place, submit = asyncio.run(measure(Path(tmp), args.nodes, args.requests))
    print(f"{args.nodes} fake agents, {args.requests} requests each, interleaved")
    print(f"{'':24}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for name, values in (("LM Place (launch)", place), ("JobService.Submit", submit)):
        print(f"{name:24}{pct(values, 0.5) * 1e3:10.2f}{pct(values, 0.99) * 1e3:10.2f}"
              f"{statistics.mean(values) * 1e3:10.2f}")
    print(f"Place / Submit, p50: {pct(place, 0.5) / pct(submit, 0.5):.2f}x")


if __name__ == "__main__":
    main()
