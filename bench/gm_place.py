"""tcl-gm's placing with one Place in flight per LM (gm/placing.py) beside one in flight in
all (the paper's synchronous calls, GlobalManager(max_in_flight=1)), side by side in one
run, alternating: one GM places a burst of one-task jobs on fake LMs (testkit/fake_lm.py)
whose Place takes --place-ms each (a master's durable write), once with every
LM alike and once with LM 0 taking --slow-ms. Prints tasks placed per second, each
mode's median over --rounds, and the ratio.

    .venv/bin/python -m bench.gm_place                        # 4 LMs, 200 tasks, 3 rounds
    .venv/bin/python -m bench.gm_place --lms 8 --tasks 400 --slow-ms 500"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")    # not the fakes' GOAWAY notes at each stop
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.gm.daemon import GMDaemon  # noqa: E402
from tcluster.gm.settings import settings_from  # noqa: E402
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2  # noqa: E402
from testkit.fake_lm import FakeLM  # noqa: E402

BIG_NODE = (64_000, 262_144)       # 64 cores, 256 GiB: room is never what limits


async def place_burst(tmp: Path, lms: int, tasks: int, delays_s: list[float], per_lm: bool) -> float:
    """Seconds from the submit until every task is RUNNING at the GM."""
    fakes = [FakeLM(i, [BIG_NODE] * 4, gms=1, interval_s=0.5) for i in range(lms)]
    for fake, delay in zip(fakes, delays_s):
        fake.place_delay_s = delay
        await fake.start()
    d = GMDaemon(settings_from(dict(
        name="gm0", index=0, listen="127.0.0.1:0", state_dir=str(tmp), gms="gm0=127.0.0.1:1", queue_map="a=gm0",
        lms=",".join(f"lm{i}={fake.address}" for i, fake in enumerate(fakes)))))
    if not per_lm:
        d.gm.max_in_flight = 1
    await d.start()
    try:
        while not all(link.usable for link in d.links):
            await asyncio.sleep(0.05)
        stub = federation_pb2_grpc.GlobalManagerServiceStub(d.channel(f"127.0.0.1:{d.port}"))
        spec = jobs_pb2.JobSpec(queue="a", tasks=tasks, command=["true"],
                                resources=common_pb2.Resources(cpu=0.1, memory=64 << 20))
        started = time.perf_counter()
        job = await stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=30)
        while d.store.tasks("job_id=? AND state!='RUNNING'", (job.id,)):
            await asyncio.sleep(0.01)
        return time.perf_counter() - started
    finally:
        await d.stop()
        for fake in fakes:
            await fake.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lms", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--place-ms", type=float, default=5.0)
    ap.add_argument("--slow-ms", type=float, default=300.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = parse_quick(ap, {"lms": 2, "tasks": 20, "place_ms": 1.0, "slow_ms": 20.0, "rounds": 1})
    logging.basicConfig(level=logging.WARNING)
    even = [args.place_ms / 1000] * args.lms
    slow = [args.slow_ms / 1000] + even[1:]
    print(f"{args.lms} LMs, {args.tasks} one-task placements, Place {args.place_ms} ms "
          f"(LM 0 {args.slow_ms} ms in 'one slow LM'); tasks/s, median of {args.rounds} alternating rounds")
    print(f"{'LMs':14} {'1 in flight':>12} {'1 per LM':>10} {'ratio':>7}")
    for name, delays in (("all alike", even), ("one slow LM", slow)):
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for per_lm in (False, True):
                with tempfile.TemporaryDirectory() as tmp:
                    seconds = asyncio.run(place_burst(Path(tmp), args.lms, args.tasks, delays, per_lm))
                rates[per_lm].append(args.tasks / seconds)
        one, per = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"{name:14} {one:12.1f} {per:10.1f} {per / one:6.2f}x")


if __name__ == "__main__":
    main()
