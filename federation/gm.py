"""The Global Manager's logic: its users' queues, a stale view of every LM, Alg. 1's
decision (internal partitions round-robin across LMs, then external partitions
round-robin across LMs), and what it does with each LM answer (notes §2.3, §2.5).

Sans-IO: `decide()` returns the next request to send (or that a task found no room, or
None when nothing can be tried on the current view); `on_answer`, `on_state` and
`on_delta` take what the LMs send. The GM keeps at most one request in flight per LM,
and `max_in_flight` in all: 1 (the default, and the simulator's) is the paper's
synchronous REST calls; tcl-gm allows one per LM, so an LM slow to answer holds back only
the placements that must go to it (notes §7: pipelining with a local debit, ≤ #LMs in
flight). With one request per LM at a time, and states applied only when newer, its view
of its own partitions is never more generous than the truth unless another GM
repartitioned from them (K7a: no internal inconsistency without repartitions). tcl-gm's
resends of unanswered requests (same ids, after a lost answer) may reach an LM beside a
new request; the LM checks each against its real state, so at worst one is answered
Inconsistent and its task tried again.

Choices where the paper is silent (notes §7):
- after an inconsistency the GM adopts the LM's state carried in the answer and puts
  the task back at the head of its queue (a new attempt, a new request id);
- a task with no room anywhere goes to the back of its queue (§IV-B5) and is not tried
  again until the view changes, so a full federation does not spin;
- external partitions within one LM are tried in rotating order of their owners;
- a task whose only room is at an LM with a request in flight waits at its queue's head
  for that answer (it is not parked as finding no room); other queues go on meanwhile."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Union

from tcluster.federation.messages import (
    Answer, Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMLayout, LMState, PreemptAndLaunch, Refused,
    RepartitionAndLaunch, Request, TaskEnded, TaskRequest,
)
from tcluster.federation.view import LMView, constraint_count


@dataclass(frozen=True)
class Send:
    lm: int
    request: Request


@dataclass(frozen=True)
class NoRoom:
    """No internal, external or preemption placement: the task went to its queue's back."""
    task: TaskRequest


Decision = Union[Send, NoRoom, None]
# How a GM keeps its view of one LM: (layout, GMs, constraints) -> a view; the simulator's
# array engine passes an array-backed LMView with the same answers (sim/federation/arrays.py).
ViewFactory = Callable[[LMLayout, int, int], LMView]
# Alg. 2's hook: (gm, task) -> a PreemptAndLaunch to send, or None (federation/fairness.py).
Preempter = Callable[["GlobalManager", TaskRequest, str], Union[Send, None]]


@dataclass
class Pending:
    task: TaskRequest
    attempt: int = 0
    failed_at: int = -1          # the view stamp at which it last found no room


@dataclass
class _Queue:
    """A user queue. Tasks that found no room at the current view stamp are parked at
    the back; the queue is ready while some task has not failed at this stamp."""
    items: deque[Pending] = field(default_factory=deque)
    failed: int = 0
    stamp: int = -1

    def _sync(self, stamp: int) -> None:
        if self.stamp != stamp:
            self.failed, self.stamp = 0, stamp

    def ready(self, stamp: int) -> bool:
        self._sync(stamp)
        return len(self.items) > self.failed

    def pop(self, stamp: int) -> Pending:
        self._sync(stamp)
        while self.items[0].failed_at == stamp:
            self.items.rotate(-1)    # a parked task moves to the back, as §IV-B5 requeues it
        return self.items.popleft()

    def park(self, p: Pending, stamp: int) -> None:
        self._sync(stamp)
        p.failed_at = stamp
        self.failed += 1
        self.items.append(p)


@dataclass
class GMStats:
    launches: int = 0
    repartitions: int = 0
    preemptions: int = 0
    internal_inconsistencies: int = 0
    external_inconsistencies: int = 0
    refused: int = 0
    no_room: int = 0


class GlobalManager:
    def __init__(self, gm: int, layouts: list[LMLayout], n_gms: int, queues: list[str],
                 repartition: bool = True, preempter: Preempter | None = None, max_in_flight: int = 1,
                 view: ViewFactory = LMView) -> None:
        self.gm, self.n_gms = gm, n_gms
        n_constraints = constraint_count(layouts)
        self.views = [view(layout, n_gms, n_constraints) for layout in layouts]
        self.queues: dict[str, _Queue] = {q: _Queue() for q in queues}
        self.order = list(queues)
        self.repartition, self.preempter = repartition, preempter
        self.rr_queue = self.rr_int = self.rr_ext = 0
        self.stamp = 0               # bumped whenever the view changes
        self.in_flight: dict[int, tuple[Pending, str, Request]] = {}     # lm -> (task, queue, request)
        self.max_in_flight = max_in_flight
        self.running: dict[str, tuple[int, int, Pending]] = {}           # own task -> (lm, node, task)
        self.stats = GMStats()

    # ---- queues ----

    def add_queue(self, name: str) -> None:
        """A queue this GM serves from now on (the live GM learns its queues from the jobs
        it stores); nothing when it has it already."""
        if name not in self.queues:
            self.queues[name] = _Queue()
            self.order.append(name)

    def submit(self, task: TaskRequest) -> None:
        """A task of a queue this GM owns (the router forwarded it, §IV-C)."""
        self.queues[task.queue].items.append(Pending(task))

    def pending(self) -> int:
        n = sum(len(q.items) for q in self.queues.values())
        return n + len(self.in_flight)

    def _next(self, waiting: set[str]) -> tuple[Pending, str] | None:
        """Queues round-robin (§IV-C), skipping those with nothing new to try and those whose
        head waits for an LM's answer."""
        for k in range(len(self.order)):
            name = self.order[(self.rr_queue + k) % len(self.order)]
            if name not in waiting and self.queues[name].ready(self.stamp):
                self.rr_queue = (self.rr_queue + k + 1) % len(self.order)
                return self.queues[name].pop(self.stamp), name
        return None

    # ---- Alg. 1 ----

    def decide(self) -> Decision:
        if len(self.in_flight) >= self.max_in_flight:
            return None
        waiting: set[str] = set()
        while (nxt := self._next(waiting)) is not None:
            p, queue = nxt
            send = self._find(p, busy=set(self.in_flight))
            if isinstance(send, Send):
                self.in_flight[send.lm] = (p, queue, send.request)
                if not isinstance(send.request, PreemptAndLaunch):
                    self.views[send.lm].debit(send.request.node, p.task.req)
                return send
            if send == "wait":         # room only where an answer is awaited
                self.queues[queue].items.appendleft(p)
                waiting.add(queue)
                continue
            self.queues[queue].park(p, self.stamp)
            self.stats.no_room += 1
            return NoRoom(p.task)
        return None

    def _find(self, p: Pending, busy: set[int]) -> Send | str | None:
        """Alg. 1, then Alg. 2's hook, over the LMs with no request in flight, in Alg. 1's order:
        "wait" as soon as a busy LM has room of the kind about to be given up (internal
        before external before preemption), and before preempting while a preemption is in
        flight (its victims' room is not in the view yet); None when nothing has room."""
        send = self._internal(p, busy)
        if send is None and busy and self._internal(p, set(), probe=True):
            return "wait"
        if send is None and self.repartition:
            send = self._external(p, busy)
            if send is None and busy and self._external(p, set(), probe=True):
                return "wait"
        if send is None and self.preempter is not None:
            if any(isinstance(f[2], PreemptAndLaunch) for f in self.in_flight.values()):
                return "wait"
            send = self.preempter(self, p.task, self._request_id(p))
            if send is not None and send.lm in busy:
                return "wait"
        return send

    @staticmethod
    def _request_id(p: Pending) -> str:
        return f"{p.task.task_id}:{p.attempt}"

    def _internal(self, p: Pending, busy: set[int], probe: bool = False) -> Send | None:
        """probe: only whether one fits; the round-robin stays where it is."""
        n = len(self.views)
        for k in range(n):
            lm = (self.rr_int + k) % n
            if lm in busy:
                continue
            view = self.views[lm]
            node = view.match(self.gm, p.task.req, p.task.pc)
            if node >= 0:
                if not probe:
                    self.rr_int = (lm + 1) % n
                return Send(lm, InternalLaunch(self._request_id(p), self.gm, view.epoch, node, p.task))
        return None

    def _external(self, p: Pending, busy: set[int], probe: bool = False) -> Send | None:
        n = len(self.views)
        others = [g for g in range(self.n_gms) if g != self.gm]
        for k in range(n):
            lm = (self.rr_ext + k) % n
            if lm in busy:
                continue
            view = self.views[lm]
            for j in range(len(others)):
                src = others[(j + self.rr_ext) % len(others)]
                node = view.match(src, p.task.req, p.task.pc)
                if node >= 0:
                    if not probe:
                        self.rr_ext = (lm + 1) % n
                    req = RepartitionAndLaunch(self._request_id(p), self.gm, view.epoch, src, node, p.task)
                    return Send(lm, req)
        return None

    # ---- what the LMs send ----

    def forget(self, lm: int) -> tuple[Pending, str, Request] | None:
        """The request in flight to `lm` is no longer awaited here (no answer came, or its
        task's job is being cancelled); the caller keeps it. Its debit stays in the view."""
        return self.in_flight.pop(lm, None)

    def on_answer(self, answer: Answer, ended: bool = False) -> None:
        """ended: the task's end was heard before this answer (it launched, and is over)."""
        lm = next((lm for lm, f in self.in_flight.items() if f[2].request_id == answer.request_id), None)
        if lm is None:
            return               # a late copy of an answer already taken: nothing to do
        p, queue, request = self.in_flight.pop(lm)
        self._take(answer, p, queue, request, ended)

    def on_late_answer(self, answer: Answer, p: Pending, queue: str, ended: bool = False) -> None:
        """The answer to a request forgotten here (none came in time; sent again with the same
        id), whose task and queue the caller kept: taken as on_answer takes one."""
        self._take(answer, p, queue, None, ended)

    def _take(self, answer: Answer, p: Pending, queue: str, request: Request | None, ended: bool) -> None:
        self._adopt(answer.state)
        if isinstance(answer, TaskLaunched):
            if not ended:
                self.running[p.task.task_id] = (answer.lm, answer.node, p)
            self.stats.launches += 1
            self.stats.repartitions += isinstance(request, RepartitionAndLaunch) or answer.logical
            self.stats.preemptions += len(answer.preempted)
            return
        if isinstance(answer, Inconsistent):
            if answer.kind is InconsistencyKind.INTERNAL:
                self.stats.internal_inconsistencies += 1
            else:
                self.stats.external_inconsistencies += 1
        elif isinstance(answer, Refused):
            self.stats.refused += 1
        p.attempt += 1
        p.failed_at = -1
        self.queues[queue].items.appendleft(p)

    def _adopt(self, state: LMState) -> None:
        if self.views[state.lm].apply(state):
            self.stamp += 1

    def on_state(self, state: LMState) -> None:
        """The LM's periodic full view (M8)."""
        self._adopt(state)

    def on_delta(self, delta: TaskEnded) -> None:
        """A prompt notice that one of this GM's tasks ended or was preempted."""
        run = self.running.pop(delta.task_id, None)
        if self.views[delta.lm].apply_delta(delta):
            self.stamp += 1
        if delta.preempted and run is not None:
            # Back at the head, to be "scheduled as a regular task" (§IV-C, notes §7), with
            # a new attempt: its old request id is answered from the LM's memory.
            p = run[2]
            p.attempt += 1
            p.failed_at = -1
            self.queues[p.task.queue].items.appendleft(p)
