"""The Sparrow baseline (Ousterhout et al.; the comparison of Megha §VI-A): batch
sampling with late binding over FIFO worker queues, in the same event-driven style and
on the same nodes and arrivals as the federation simulation (sim/federation/sim.py).

Model:
- a scheduler takes a task at its arrival (handler time `sched_handler_s`, schedulers
  are many and never queue) and probes `probes` distinct workers drawn at random among
  those that satisfy the task's constraints and could ever hold it (Sparrow's per-job
  constraints: it probes only eligible workers, so K8 holds by construction);
- the synthetic workload has no jobs, so each task is a job of one task and batch
  sampling is per-task sampling with d probes (the batch of m tasks would probe d*m);
- a probe reaches the worker after `net_base_s` (0.5 ms) and joins its FIFO queue of
  reservations; a worker serves the head reservation once the task's request fits its
  free room (head-of-line blocking, as a FIFO queue does), reserves that room, and asks
  the scheduler for the task (late binding: one more `net_base_s` each way);
- the first worker to ask gets the task; a later ask gets a no-op and the worker gives
  the room back and serves its next reservation (no proactive cancellation).

Allocation time = start - arrival; processing = the scheduler's handler; communication =
the probe, the ask and the reply; worker queuing = the rest (waiting in the worker's
queue behind other reservations). There is no framework queue."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tcluster.federation.messages import LMNode, Res, add, fits, satisfies, sub
from tcluster.sim.clock import EventHeap
from tcluster.sim.federation.workload import Arrival

_END, _ASK, _REPLY, _PROBE, _ARRIVE = range(5)


@dataclass(frozen=True)
class SparrowConfig:
    probes: int = 2
    net_base_s: float = 0.0005
    sched_handler_s: float = 0.0001
    seed: int = 1


@dataclass
class SparrowRecord:
    arrival: float
    start: float | None = None
    node: int = -1
    processing: float = 0.0
    communication: float = 0.0


@dataclass
class SparrowRun:
    config: SparrowConfig
    records: dict[str, SparrowRecord]
    nodes: tuple[LMNode, ...]
    # ("commit" | "release", node, task_id, req) in time order: the room actually held.
    ledger: list[tuple[str, int, str, Res]] = field(default_factory=list)
    pcs: dict[str, int] = field(default_factory=dict)
    noops: int = 0                  # asks answered with a no-op (the task had started elsewhere)


class SparrowSim:
    def __init__(self, config: SparrowConfig, nodes: tuple[LMNode, ...], arrivals: list[Arrival]) -> None:
        self.cfg, self.nodes = config, nodes
        self.rng = random.Random(config.seed)
        self.free: list[Res] = [n.cap for n in nodes]
        self.queue: list[deque[Arrival]] = [deque() for _ in nodes]
        self.launched: set[str] = set()
        self.caps = frozenset(n.cap for n in nodes)
        self.eligible: dict[tuple[int, frozenset[Res]], list[int]] = {}
        self.run = SparrowRun(config, {}, nodes)
        self.clock: EventHeap[Any] = EventHeap()
        for a in arrivals:
            self._push(a.t, _ARRIVE, a)

    @property
    def now(self) -> float:
        return self.clock.now

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.clock.push(t, kind, payload)

    def simulate(self) -> SparrowRun:
        handlers = {_END: self._end, _ASK: self._ask, _REPLY: self._reply, _PROBE: self._probe,
                    _ARRIVE: self._arrive}
        while self.clock:
            kind, payload = self.clock.pop()
            handlers[kind](payload)
        return self.run

    def _candidates(self, pc: int, req: Res) -> list[int]:
        """The nodes satisfying `pc` whose capacity fits `req`, in index order. Cached per
        (constraints, capacities that fit) rather than per request: requests are nearly all
        distinct, nodes share a few capacities, and a list of every node per request held
        gigabytes at 10,000 workers (issue 38)."""
        caps = frozenset(c for c in self.caps if fits(req, c))
        key = (pc, caps)
        if key not in self.eligible:
            self.eligible[key] = [i for i, n in enumerate(self.nodes) if satisfies(n.cmask, pc) and n.cap in caps]
        return self.eligible[key]

    def _arrive(self, a: Arrival) -> None:
        task = a.task
        rec = SparrowRecord(a.t, processing=self.cfg.sched_handler_s)
        self.run.records[task.task_id] = rec
        self.run.pcs[task.task_id] = task.pc
        pool = self._candidates(task.pc, task.req)
        if not pool:
            return               # fits no worker: never placed (counted as unplaced)
        picked = self.rng.sample(pool, min(self.cfg.probes, len(pool)))
        at = self.now + self.cfg.sched_handler_s + self.cfg.net_base_s
        for node in picked:
            self._push(at, _PROBE, (node, a))

    def _probe(self, item: tuple[int, Arrival]) -> None:
        node, a = item
        self.queue[node].append(a)
        self._serve(node)

    def _serve(self, node: int) -> None:
        """FIFO: the head reservation goes first once its task fits; nothing overtakes it."""
        q = self.queue[node]
        while q and fits(q[0].task.req, self.free[node]):
            a = q.popleft()
            self.free[node] = sub(self.free[node], a.task.req)
            self._push(self.now + self.cfg.net_base_s, _ASK, (node, a))

    def _ask(self, item: tuple[int, Arrival]) -> None:
        """The scheduler binds the task to the first worker that asks for it."""
        node, a = item
        first = a.task.task_id not in self.launched
        if first:
            self.launched.add(a.task.task_id)
        self._push(self.now + self.cfg.net_base_s, _REPLY, (node, a, first))

    def _reply(self, item: tuple[int, Arrival, bool]) -> None:
        node, a, first = item
        if not first:
            self.run.noops += 1
            self.free[node] = add(self.free[node], a.task.req)
            self._serve(node)
            return
        rec = self.run.records[a.task.task_id]
        rec.start, rec.node = self.now, node
        rec.communication = 3 * self.cfg.net_base_s      # probe, ask, reply
        self.run.ledger.append(("commit", node, a.task.task_id, a.task.req))
        self._push(self.now + a.task.duration_s, _END, (node, a))

    def _end(self, item: tuple[int, Arrival]) -> None:
        node, a = item
        self.free[node] = add(self.free[node], a.task.req)
        self.run.ledger.append(("release", node, a.task.task_id, a.task.req))
        self._serve(node)


def simulate_sparrow(config: SparrowConfig, nodes: tuple[LMNode, ...], arrivals: list[Arrival]) -> SparrowRun:
    return SparrowSim(config, nodes, arrivals).simulate()
