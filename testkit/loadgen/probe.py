"""`tcl-master`, with timers: the real master's main and code, unchanged, with a few of
its functions wrapped to time them (two perf_counter calls each):

- every scheduling round (`schedule_round`, the pure part) and every `schedule_once`
  (the round plus writing and sending its placements), with the pending-job count;
- every state step `MasterService._do`, by event type, and the SQLite write within it;
- the gRPC message conversions (`inbound_from_pb`, `outbound_to_pb`);
- every group commit (`commit` of the SQLite Store or the EtcdStore): batches, steps,
  wall time (for etcd also its transactions and their operations);
- the event loop's lateness (a 50 ms ticker: the longest stall, stalls over 1 s), and
  etcd's lease keepalives (round trip): a leader whose loop stalls past its lease
  deadline steps down (docs/ha.md);
- the dashboard's steps on the loop (`dash.drain`, `dash.sample`, `dash.collect`,
  `dash.finish`) and CPython's garbage collections by generation (`gc.gen0` .. `gc.gen2`,
  from gc.callbacks): each a pause of the loop, listed with the state steps.

On a lost leadership the master re-executes itself (`-m tcluster.master.app.main` with its
own arguments): sys.argv is set to the master's arguments so that it restarts as a plain
master (without these timers).

SIGUSR1 writes what was timed since the last SIGUSR1 to the --stats file (JSON, written
whole then renamed) and starts afresh. SIGUSR2 starts/stops cProfile (main thread only)
when --cprofile FILE is given; the profile is written when it stops.

    python -m testkit.loadgen.probe --stats /tmp/s.json -- --listen 127.0.0.1:0 ...
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import signal
import sys
import time
from collections import defaultdict
from typing import Any, Callable

perf = time.perf_counter


class Timers:
    def __init__(self) -> None:
        self.reset()
        self.seq = 0

    def reset(self) -> None:
        self.rounds: list[tuple[float, int, int]] = []          # seconds, pending jobs, placements
        self.schedule_once: list[float] = []
        self.steps: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # n, total s, store s, max s
        self.convert: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.commits = [0, 0, 0.0, 0.0, 0, 0]     # batches, steps, total s, max s, txns, txn ops
        self.loop = [0, 0.0, 0, 0]                 # ticks, max lateness s, ticks > 0.5 s late, > 1 s late
        self.keepalive = [0, 0.0, 0.0]             # calls, total s, max s
        self.since = time.monotonic()

    def dump(self) -> dict[str, object]:
        self.seq += 1
        out = {"seq": self.seq, "window_s": time.monotonic() - self.since, "rounds": self.rounds,
               "schedule_once": self.schedule_once, "steps": dict(self.steps), "convert": dict(self.convert),
               "commits": self.commits, "loop": self.loop, "keepalive": self.keepalive}
        self.reset()
        return out


TIMERS = Timers()


def _count_step(name: str, took: float) -> None:
    """One more `name` in the steps table: count, total and longest (store time apart)."""
    row = TIMERS.steps[name]
    row[0] += 1
    row[1] += took
    row[3] = max(row[3], took)


class ProbeTargetMissing(RuntimeError):
    """What the probe wraps moved: it fails at start, rather than time nothing."""


def wrap(owner: object, name: str, make: Callable[[Any], Any], used_by: Callable[..., Any] | None = None) -> None:
    """owner.name = make(owner.name), where owner is a module or a class. Raises
    ProbeTargetMissing when there is no owner.name, or when `used_by` (the function that
    calls it) no longer looks the name up in owner's globals: a function that moved (and
    is imported from elsewhere, or called elsewhere) would otherwise be wrapped where
    nothing calls it, and the bench would quietly report no rounds."""
    where = getattr(owner, "__name__", repr(owner))
    if not hasattr(owner, name):
        raise ProbeTargetMissing(f"probe: {where}.{name} is gone (moved?): update testkit/loadgen/probe.py")
    if used_by is not None:
        code = used_by.__code__
        if name not in code.co_names or used_by.__globals__ is not vars(owner):
            raise ProbeTargetMissing(f"probe: {used_by.__qualname__} no longer calls {where}.{name} "
                                     f"(moved?): update testkit/loadgen/probe.py")
    setattr(owner, name, make(getattr(owner, name)))


def install() -> None:
    from tcluster.master import agentside, rounds, service
    from tcluster.master.edge import grpc_api
    from tcluster.master.store import sqlite as store

    current = {"event": "?"}
    # The pure round: wrapped in the module whose schedule_once calls it (master/rounds.py
    # today), wherever MasterService gets schedule_once from.
    once = rounds.Rounds.schedule_once

    def timed_round(round_fn):  # type: ignore[no-untyped-def]
        def schedule_round(jobs, pending, *args, **kwargs):  # type: ignore[no-untyped-def]
            start = perf()
            result = round_fn(jobs, pending, *args, **kwargs)
            TIMERS.rounds.append((perf() - start, len(pending), len(result.placements)))
            return result
        return schedule_round

    wrap(sys.modules[once.__module__], "schedule_round", timed_round, used_by=once)

    once_fn = rounds.Rounds.schedule_once

    def schedule_once(self):  # type: ignore[no-untyped-def]
        start = perf()
        result = once_fn(self)
        if self.master.state.pending_jobs or result:
            TIMERS.schedule_once.append(perf() - start)
        return result

    rounds.Rounds.schedule_once = schedule_once

    do_fn = service.MasterService._do

    def _do(self, event):  # type: ignore[no-untyped-def]
        name = type(event).__name__
        current["event"] = name
        start = perf()
        try:
            return do_fn(self, event)
        finally:
            _count_step(name, perf() - start)

    service.MasterService._do = _do

    apply_fn = store.Store.apply

    def apply(self, step, new_jobs=()):  # type: ignore[no-untyped-def]
        start = perf()
        try:
            return apply_fn(self, step, new_jobs)
        finally:
            TIMERS.steps[current["event"]][2] += perf() - start

    store.Store.apply = apply

    attach_fn = agentside.Agents.attach

    def attach(self, reg):  # type: ignore[no-untyped-def]
        current["event"] = "AgentJoined"
        start = perf()
        try:
            return attach_fn(self, reg)
        finally:
            _count_step("AgentJoined", perf() - start)

    agentside.Agents.attach = attach

    names = ("inbound_from_pb", "outbound_to_pbs" if hasattr(grpc_api, "outbound_to_pbs") else "outbound_to_pb")
    for name in names:
        def timed_convert(fn, _name=name):  # type: ignore[no-untyped-def]
            def timed(message):  # type: ignore[no-untyped-def]
                start = perf()
                try:
                    return fn(message)
                finally:
                    row = TIMERS.convert[_name]
                    row[0] += 1
                    row[1] += perf() - start
            return timed

        wrap(grpc_api, name, timed_convert)

    _time_commits(store.Store)
    from tcluster.master.store import etcd as etcdstore
    _time_commits(etcdstore.EtcdStore)
    chunks_fn = etcdstore.EtcdStore._chunks

    def _chunks(self, writes):  # type: ignore[no-untyped-def]
        for chunk in chunks_fn(self, writes):      # one transaction each
            TIMERS.commits[4] += 1
            TIMERS.commits[5] += len(chunk)
            yield chunk

    etcdstore.EtcdStore._chunks = _chunks

    from tcluster.etcd import kv as etcdkv
    keepalive_fn = etcdkv.EtcdKV.keepalive

    async def keepalive(self, lease):  # type: ignore[no-untyped-def]
        start = perf()
        try:
            return await keepalive_fn(self, lease)
        finally:
            took = perf() - start
            row = TIMERS.keepalive
            row[0] += 1
            row[1] += took
            row[2] = max(row[2], took)

    etcdkv.EtcdKV.keepalive = keepalive

    _time_dashboard()
    _time_collections()
    from tcluster.master.app import main as master_main_module
    start_fn = master_main_module.start_master

    async def start_master(*args, **kwargs):  # type: ignore[no-untyped-def]
        import asyncio
        asyncio.get_running_loop().create_task(_loop_ticker(), name="probe-loop-lag")
        return await start_fn(*args, **kwargs)

    master_main_module.start_master = start_master


async def _loop_ticker(period: float = 0.05) -> None:
    import asyncio
    while True:
        due = perf() + period
        await asyncio.sleep(period)
        late = perf() - due
        row = TIMERS.loop
        row[0] += 1
        row[1] = max(row[1], late)
        row[2] += late > 0.5
        row[3] += late > 1.0


def _timed_step(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = perf()
        try:
            return fn(*args, **kwargs)
        finally:
            _count_step(name, perf() - start)
    return timed


def _time_dashboard() -> None:
    """The dashboard's own work on the loop (issue 38: at 20,000 tasks each step held the
    loop 60-90 ms, the churn's latency tail)."""
    from tcluster.master.usage import historydb, recorder
    for owner, method, name in ((recorder.Recorder, "drain_part", "dash.drain"),   # each part holds the loop
                                (recorder.Recorder, "sample_cluster", "dash.sample"),
                                (historydb.HistoryStore, "collect", "dash.collect"),
                                (historydb.HistoryStore, "finish", "dash.finish")):
        fn = vars(owner).get(method)      # defined on the class itself: the one its callers find
        if fn is None:
            raise ProbeTargetMissing(f"probe: {owner.__name__}.{method} is gone (moved?): update testkit/loadgen/probe.py")
        wrapped = _timed_step(name, fn.__func__ if isinstance(fn, staticmethod) else fn)
        setattr(owner, method, staticmethod(wrapped) if isinstance(fn, staticmethod) else wrapped)


def _time_collections() -> None:
    """CPython's collections, by generation: each stops every thread that holds the GIL."""
    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = perf()
            return
        _count_step(f"gc.gen{info['generation']}", perf() - started[0])

    gc.callbacks.append(on_gc)


def _time_commits(cls: type) -> None:
    commit_fn = cls.commit

    async def commit(self, steps):  # type: ignore[no-untyped-def]
        start = perf()
        try:
            return await commit_fn(self, steps)
        finally:
            took = perf() - start
            row = TIMERS.commits
            row[0] += 1
            row[1] += len(steps)
            row[2] += took
            row[3] = max(row[3], took)

    cls.commit = commit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stats", required=True, help="where SIGUSR1 writes the timings (JSON)")
    parser.add_argument("--cprofile", help="SIGUSR2 toggles cProfile; written here when toggled off")
    parser.add_argument("master_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    install()

    def on_usr1(signum: int, frame: object) -> None:
        data = TIMERS.dump()
        tmp = args.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, args.stats)

    signal.signal(signal.SIGUSR1, on_usr1)
    profiler: dict[str, cProfile.Profile | None] = {"p": None}

    def on_usr2(signum: int, frame: object) -> None:
        if not args.cprofile:
            return
        if profiler["p"] is None:
            profiler["p"] = cProfile.Profile()
            profiler["p"].enable()
        else:
            profiler["p"].disable()
            profiler["p"].dump_stats(args.cprofile)
            profiler["p"] = None

    signal.signal(signal.SIGUSR2, on_usr2)
    from tcluster.master.app.main import main as master_main
    master_args = args.master_args[1:] if args.master_args[:1] == ["--"] else args.master_args
    sys.argv = [sys.argv[0], *master_args]      # what a re-executing master (lost leadership) runs again
    return master_main(master_args)


if __name__ == "__main__":
    sys.exit(main())
