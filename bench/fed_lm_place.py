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
import tempfile
import time
from pathlib import Path

from tcluster.v1 import federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2
from tests.component.harness import Harness


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(tmp: Path, nodes: int, requests: int) -> tuple[list[float], list[float]]:
    h = Harness(tmp)
    try:
        await h.start_master(federation_lm_id=0, federation_gms=1, federation_state_interval_s=60)
        for i in range(nodes):
            await h.add_agent(f"n{i:04d}", cpus=64, memory=256 * 2**30)
        lm = federation_pb2_grpc.LocalManagerServiceStub(h.channel)
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
            assert answer.WhichOneof("outcome") == "launched", answer
            started = time.perf_counter()
            await h.submit(["sleep"], cpu=0.1, memory=64 * 2**20)
            submit.append(time.perf_counter() - started)
        stream.cancel()
        return place, submit
    finally:
        await h.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=40)
    p.add_argument("--requests", type=int, default=400)
    args = p.parse_args()
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
