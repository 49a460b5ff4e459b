"""A discrete-event simulation of a federation, N LMs x M GMs, running the real GM and
LM objects (federation/gm.py, federation/lm.py) as the paper's simulator ran its
prototype's code (§V). The clock jumps from event to event on a heap; no threads.

Model (notes §5):
- every message takes `net_base_s` (0.5 ms, Sparrow's probe delay) plus, for messages
  that carry an LM state, its size over `bandwidth` (bytes_per_node per node); links are
  FIFO, as a TCP stream is, so a small delta never overtakes an earlier big state;
- each GM decision and each LM check costs a constant handler time; an LM serves its
  requests one at a time in arrival order (its check-and-commit is atomic);
- a launched task starts when the LM's launch message reaches the worker; its end
  reaches the LM `net_base_s` after it finishes (worker -> LM), at no handler cost;
- every LM sends its full state to every GM each `heartbeat_s` (staggered), and a prompt
  delta to a task's GM when the task ends (§6.2).

Allocation time (Eq. 1) = start - arrival, split (Eq. 2) into processing (handler time
spent on the task's decisions and checks), communication (its requests, the answers of
its failed attempts, and the launch message) and queuing (the rest: waiting in the GM's
queue, in an LM's queue, and for room). Worker queuing is zero: an LM launches only
what it has verified.

`tcl sim` runs it on a scenario with a `federation:` mapping (sim/federation/scenario.py),
beside its baselines (sim/federation/compare.py); `systems: [megha]` runs it alone."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from tcluster.federation.fairness import FairPreempter
from tcluster.federation.gm import GlobalManager, GMStats, NoRoom, Send
from tcluster.federation.lm import LocalManager, Notice
from tcluster.federation.messages import Answer, TaskLaunched, LMState, LMNode, Request, Res, TaskRequest
from tcluster.federation.view import LMView, split
from tcluster.sim.federation.arrays import lm_for, view_for
from tcluster.sim.clock import EventHeap
from tcluster.sim.federation.workload import Arrival, WorkloadSpec, cluster_nodes, tasks

# At equal times: ends free room before arrivals and requests look for it.
_END, _STATE, _DELTA, _ANSWER, _LM_IN, _LM_DO, _START, _ARRIVE, _WAKE, _BEAT = range(10)


# An LM remembers its last answers for a GM's resends; the simulator never resends a request
# id (a retry is a new attempt), and each answer holds a full state: 4,096 of them per LM held
# 1.6 GB at 50,000 workers.
REMEMBER_ANSWERS = 64


@dataclass(frozen=True)
class FedConfig:
    lms: int = 3
    gms: int = 3
    workers: int = 300
    queues_per_gm: int = 1
    net_base_s: float = 0.0005
    bytes_per_node: int = 24           # an int64 pair and a uint32 mask per node, packed
    bandwidth_Bps: float = 125e6       # 1 Gb/s
    gm_handler_s: float = 0.0001
    lm_handler_s: float = 0.00005
    heartbeat_s: float = 10.0
    repartition: bool = True
    preemption: bool = False           # Alg. 2, with equal shares over all queues
    seed: int = 1
    engine: str = "array"              # or "object": per-node tuples (bench/federation_sim.py's old side)


@dataclass
class FedSimRecord:
    arrival: float
    gm: int
    start: float | None = None
    end: float | None = None
    lm: int = -1
    node: int = -1
    processing: float = 0.0
    communication: float = 0.0
    attempts: int = 0
    logical: bool = False


@dataclass
class FedSimRun:
    config: FedConfig
    records: dict[str, FedSimRecord]
    gm_stats: list[GMStats]
    clusters: list[tuple[LMNode, ...]]
    # (kind, lm, node, task_id, req) in the order the LMs applied them: "commit" / "release".
    ledger: list[tuple[str, int, int, str, Res]] = field(default_factory=list)
    pcs: dict[str, int] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)     # task -> times started


Preempter = Callable[..., Any]


class FederationSim:
    def __init__(self, config: FedConfig, clusters: list[tuple[LMNode, ...]],
                 arrivals: list[Arrival], preempter: Preempter | None = None) -> None:
        self.cfg = config
        layouts = [split(i, nodes, config.gms) for i, nodes in enumerate(clusters)]
        lm_cls, view = (lm_for, view_for) if config.engine == "array" else (LocalManager, LMView)
        self.lms = [lm_cls(layout, publish_tasks=config.preemption, remember=REMEMBER_ANSWERS) for layout in layouts]
        owner = {q: g for g in range(config.gms) for q in queues_of(g, config.queues_per_gm)}
        self.queue_gm = owner
        if config.preemption and preempter is None:
            preempter = FairPreempter({q: 1.0 / len(owner) for q in owner})
        self.gms = [GlobalManager(g, layouts, config.gms, queues_of(g, config.queues_per_gm),
                                  config.repartition, preempter, view=view) for g in range(config.gms)]
        self.run = FedSimRun(config, {}, [gm.stats for gm in self.gms], clusters)
        self.clock: EventHeap[Any] = EventHeap()
        self.link_free: dict[tuple[str, int, int], float] = {}
        self.lm_busy = [0.0] * config.lms
        self.gm_busy = [0.0] * config.gms
        self.gm_woken = [False] * config.gms
        self.deciding: list[str | None] = [None] * config.gms     # task whose request is out
        self.unended = len(arrivals)
        self.future_arrivals = len(arrivals)
        self.launched_since_beat = 0
        self.current: dict[str, str] = {}       # running task -> the request that launched it
        for a in arrivals:
            self._push(a.t, _ARRIVE, a)
        for lm in range(config.lms):
            self._push(config.heartbeat_s * (lm + 1) / config.lms, _BEAT, lm)
        for gm in self.gms:          # a GM starts from one full state of every LM (Snapshot)
            for lm in self.lms:
                gm.on_state(lm.state())

    # ---- plumbing ----

    @property
    def now(self) -> float:
        return self.clock.now

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.clock.push(t, kind, payload)

    def _send(self, link: tuple[str, int, int], kind: int, payload: Any, nodes: int = 0,
              leave: float | None = None) -> float:
        """Deliver over a FIFO link after the base delay plus the state's transfer time.
        The message leaves at `leave` (default now); returns how long it took from then."""
        sent = self.now if leave is None else leave
        delay = self.cfg.net_base_s + nodes * self.cfg.bytes_per_node / self.cfg.bandwidth_Bps
        at = max(sent + delay, self.link_free.get(link, 0.0))
        self.link_free[link] = at
        self._push(at, kind, payload)
        return at - sent

    def _wake(self, g: int, at: float | None = None) -> None:
        if not self.gm_woken[g]:
            self.gm_woken[g] = True
            self._push(self.now if at is None else at, _WAKE, g)

    def simulate(self) -> FedSimRun:
        handlers = {_END: self._end, _STATE: self._state, _DELTA: self._delta, _ANSWER: self._answer,
                    _LM_IN: self._lm_in, _LM_DO: self._check, _START: self._start, _ARRIVE: self._arrive, _WAKE: self._gm_wake,
                    _BEAT: self._beat}
        while self.clock:
            kind, payload = self.clock.pop()
            handlers[kind](payload)
        return self.run

    # ---- GMs ----

    def _arrive(self, a: Arrival) -> None:
        self.future_arrivals -= 1
        g = self.queue_gm[a.gm_queue]
        self.run.records[a.task.task_id] = FedSimRecord(a.t, g)
        self.run.pcs[a.task.task_id] = a.task.pc
        self.gms[g].submit(a.task)
        self._wake(g)

    def _gm_wake(self, g: int) -> None:
        self.gm_woken[g] = False
        if self.gm_busy[g] > self.now:
            self._wake(g, self.gm_busy[g])
            return
        decision = self.gms[g].decide()
        if decision is None:
            return               # idle until an answer, a state, a delta or an arrival
        task_id = decision.task.task_id if isinstance(decision, NoRoom) else decision.request.task.task_id
        rec = self.run.records[task_id]
        rec.processing += self.cfg.gm_handler_s
        self.gm_busy[g] = self.now + self.cfg.gm_handler_s
        if isinstance(decision, Send):
            rec.attempts += 1
            rec.communication += self._send(("req", g, decision.lm), _LM_IN, (g, decision),
                                            leave=self.now + self.cfg.gm_handler_s)   # once decided
        else:
            self._wake(g, self.gm_busy[g])

    def _answer(self, item: tuple[int, Answer]) -> None:
        g, answer = item
        self.gms[g].on_answer(answer)
        self._wake(g)

    def _state(self, item: tuple[int, LMState]) -> None:
        g, state = item
        self.gms[g].on_state(state)
        self._wake(g)

    def _delta(self, notice: Notice) -> None:
        g, delta = notice
        self.gms[g].on_delta(delta)
        self._wake(g)

    # ---- LMs ----

    def _lm_in(self, item: tuple[int, Send]) -> None:
        """A request reached its LM: it waits for the LM, then is checked and committed
        atomically at the end of the handler time."""
        g, send = item
        start = max(self.now, self.lm_busy[send.lm])
        self.lm_busy[send.lm] = start + self.cfg.lm_handler_s
        self._push(self.lm_busy[send.lm], _LM_DO, (g, send.request, send.lm))

    def _check(self, item: tuple[int, Request, int]) -> None:
        g, request, lm_i = item
        lm = self.lms[lm_i]
        answer, notices = lm.handle(request)
        rec = self.run.records[request.task.task_id]
        rec.processing += self.cfg.lm_handler_s
        nodes = len(lm.free)
        took = self._send(("ans", lm_i, g), _ANSWER, (g, answer), nodes)
        for notice in notices:           # the LM stopped the victims before it committed
            self._released(lm_i, notice)
        if isinstance(answer, TaskLaunched) and self.current.get(request.task.task_id) != answer.request_id:
            self.current[request.task.task_id] = answer.request_id
            self.run.ledger.append(("commit", lm_i, answer.node, request.task.task_id, request.task.req))
            rec.lm, rec.node, rec.logical = lm_i, answer.node, answer.logical
            rec.communication += self._send(("launch", lm_i, answer.node), _START,
                                            (request.task, answer.request_id))
            self.launched_since_beat += 1
        else:
            rec.communication += took

    def _start(self, item: tuple[TaskRequest, str]) -> None:
        task, request_id = item
        rec = self.run.records[task.task_id]
        rec.start = self.now
        self.run.launches[task.task_id] = self.run.launches.get(task.task_id, 0) + 1
        self._push(self.now + task.duration_s + self.cfg.net_base_s, _END, (rec.lm, task.task_id, request_id))

    def _end(self, item: tuple[int, str, str]) -> None:
        lm_i, task_id, request_id = item
        if self.current.get(task_id) != request_id or task_id not in self.lms[lm_i].running:
            return               # preempted before it ended (and maybe running again elsewhere)
        del self.current[task_id]
        self.run.records[task_id].end = self.now
        self.unended -= 1
        self._released(lm_i, self.lms[lm_i].end(task_id))

    def _released(self, lm_i: int, notice: Notice) -> None:
        g, delta = notice
        if delta.preempted:
            del self.current[delta.task_id]      # its pending end is void; the GM requeues it
        self.run.ledger.append(("release", lm_i, delta.node, delta.task_id, ()))
        self._send(("ans", lm_i, g), _DELTA, notice)

    def _beat(self, lm_i: int) -> None:
        state = self.lms[lm_i].state()
        for g in range(self.cfg.gms):
            self._send(("ans", lm_i, g), _STATE, (g, state), len(state.free))
        if self._active():
            self._push(self.now + self.cfg.heartbeat_s, _BEAT, lm_i)
        if lm_i == self.cfg.lms - 1:
            self.launched_since_beat = 0

    def _active(self) -> bool:
        """Keep the periodic updates while anything can still happen: tasks run or are
        on their way, or the last period launched something. A run whose leftover tasks
        fit nowhere (no repartition) ends one quiet period after its last launch."""
        if self.unended == 0:
            return False
        running = any(lm.running for lm in self.lms)
        return running or self.future_arrivals > 0 or self.launched_since_beat > 0 \
            or any(gm.in_flight for gm in self.gms)


def queues_of(g: int, per_gm: int) -> list[str]:
    return [f"q{g}.{k}" for k in range(per_gm)]


def simulate(config: FedConfig, spec: WorkloadSpec, preempter: Preempter | None = None) -> FedSimRun:
    rng = random.Random(config.seed)
    clusters = cluster_nodes(rng, config.lms, config.workers, spec.n_constraints)
    queues = [q for g in range(config.gms) for q in queues_of(g, config.queues_per_gm)]
    arrivals = tasks(rng, spec, clusters, queues)
    return FederationSim(config, clusters, arrivals, preempter).simulate()
