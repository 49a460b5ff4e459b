"""The Local Manager's logic: the only consistent state of its cluster, and the
check-and-commit of every GM request against it (§IV-A, §IV-B4, §IV-B6; notes §2.4).

Sans-IO: `handle(request)` returns the answer plus the per-GM notices it causes (tasks
of other GMs stopped by a preemption); `end(task_id)` returns the prompt delta for the
task's GM; `state()` is the periodic view. A live LM must run `handle` atomically with
respect to every other request (one event loop), as the simulator does.

The check table, in the order it is applied:
  duplicate request id  -> the first answer again (never launch twice)
  stale epoch           -> Refused (a GM that missed a failover)
  node not in the partition the request names -> Inconsistent(NOT_IN_PARTITION); for an
                           InternalLaunch the GM's refreshed view then sends it the repartition way
  node not schedulable  -> Inconsistent(INSUFFICIENT): a live master's node that is not READY,
                           or is cordoned, draining, drained or in maintenance takes no new
                           task, not even in the room a preemption's victims would free
  constraints or room insufficient -> Inconsistent(INSUFFICIENT / VICTIM_GONE)
  fits                  -> commit, TaskLaunched

Room: the simulator's LM keeps its own books (`free`). A live LM (a tcl-master,
master/features/federation_lm.py) passes `room`: node index -> the master's real free room, with
its local jobs taken out, so a node that local work filled is INSUFFICIENT whatever this
LM's own books say; the published state's free room is that real room too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tcluster.federation.messages import (
    Answer, Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMLayout, LMState, LogicalNode, PreemptAndLaunch, Refused,
    RepartitionAndLaunch, Request, Res, TaskEnded, TaskOn, TaskRequest, Why, add, fits, satisfies, sub,
)

Notice = tuple[int, TaskEnded]      # (GM to tell, what happened to its task)
Room = Callable[[int], Res]         # node index -> free room now (a live master's own state)
Schedulable = Callable[[int], bool]  # node index -> whether it takes new tasks now


@dataclass(frozen=True)
class Running:
    task: TaskRequest
    gm: int
    node: int
    logical: LogicalNode | None


class LocalManager:
    def __init__(self, layout: LMLayout, epoch: int = 1, publish_tasks: bool = False,
                 remember: int = 4096, room: Room | None = None, schedulable: Schedulable | None = None) -> None:
        self.layout = layout
        self.room = room
        self.schedulable: Schedulable = schedulable or (lambda node: True)
        self._all_open = schedulable is None
        # The running-task list in every state costs O(tasks) per change: only when GMs
        # run Alg. 2 and must pick victims.
        self.publish_tasks = publish_tasks
        self.lm = layout.lm
        self.epoch = epoch
        self.version = 0
        self.free: list[Res] = [n.cap for n in layout.nodes]
        self.running: dict[str, Running] = {}
        # request id -> first answer, the last `remember` of them (notes §6.4 #4: as long
        # as a GM may retry). Bounded because every answer holds a full state: a 10,000-node
        # LM's 100,000 answers would otherwise keep gigabytes of old states alive.
        self.answers: dict[str, Answer] = {}
        self.remember = remember
        self.usage: dict[str, Res] = {}          # queue -> running request total (for Alg. 2)
        # The running logical nodes in launch order, kept beside `running` so that a state
        # costs O(logical nodes), not a walk over every running task per version.
        self.logical: dict[str, LogicalNode] = {}
        self._state: LMState | None = None

    # ---- requests ----

    def handle(self, req: Request) -> tuple[Answer, tuple[Notice, ...]]:
        first = self.answers.get(req.request_id)
        if first is not None:
            return first, ()
        notices: tuple[Notice, ...] = ()
        if req.epoch != self.epoch:
            answer: Answer = Refused(req.request_id, req.task.task_id, self.lm, self.epoch, self.state())
        elif not 0 <= req.node < len(self.free):
            answer = self._fail(req, InconsistencyKind.INTERNAL, Why.UNKNOWN_NODE)
        elif isinstance(req, InternalLaunch):
            answer = self._launch(req)
        elif isinstance(req, RepartitionAndLaunch):
            answer = self._repartition(req)
        else:
            answer, notices = self._preempt(req)
        self.answers[req.request_id] = answer
        if len(self.answers) > self.remember:
            del self.answers[next(iter(self.answers))]     # the oldest (dicts keep insertion order)
        return answer, notices

    def _launch(self, req: InternalLaunch) -> Answer:
        if self.layout.owner[req.node] != req.gm:
            return self._fail(req, InconsistencyKind.INTERNAL, Why.NOT_IN_PARTITION)
        if not self.schedulable(req.node) or not self._fits(req.task, req.node, self.room_of(req.node)):
            return self._fail(req, InconsistencyKind.INTERNAL, Why.INSUFFICIENT)
        self._commit(req, None)
        return TaskLaunched(req.request_id, req.task.task_id, self.lm, req.node, self.state())

    def _repartition(self, req: RepartitionAndLaunch) -> Answer:
        if req.src == req.gm or self.layout.owner[req.node] != req.src:
            return self._fail(req, InconsistencyKind.EXTERNAL, Why.NOT_IN_PARTITION)
        if not self.schedulable(req.node) or not self._fits(req.task, req.node, self.room_of(req.node)):
            return self._fail(req, InconsistencyKind.EXTERNAL, Why.INSUFFICIENT)
        self._commit(req, LogicalNode(req.node, req.task.req, req.gm, req.task.task_id))
        return TaskLaunched(req.request_id, req.task.task_id, self.lm, req.node, self.state(), logical=True)

    def _preempt(self, req: PreemptAndLaunch) -> tuple[Answer, tuple[Notice, ...]]:
        """The victims must all still run on the node and freeing them must make room;
        anything else is an inconsistency (the paper leaves the check open, notes §2.4)."""
        kind = InconsistencyKind.INTERNAL if self.layout.owner[req.node] == req.gm else InconsistencyKind.EXTERNAL
        victims = [self.running.get(v) for v in req.victims]
        if not victims or any(v is None or v.node != req.node for v in victims):
            return self._fail(req, kind, Why.VICTIM_GONE), ()
        if not self.schedulable(req.node):
            return self._fail(req, kind, Why.INSUFFICIENT), ()     # victims' room is no room there
        room = self.room_of(req.node)
        for v in victims:
            room = add(room, v.task.req)
        if not self._fits(req.task, req.node, room):
            return self._fail(req, kind, Why.INSUFFICIENT), ()
        notices = tuple(self._release(v, preempted=True) for v in victims)
        logical = None if kind is InconsistencyKind.INTERNAL else LogicalNode(req.node, req.task.req, req.gm, req.task.task_id)
        self._commit(req, logical)
        answer = TaskLaunched(req.request_id, req.task.task_id, self.lm, req.node, self.state(),
                          logical=logical is not None, preempted=req.victims)
        return answer, notices

    def room_of(self, node: int) -> Res:
        """The node's free room: the live master's real room, else this LM's books."""
        return self.room(node) if self.room is not None else self.free[node]

    def _fits(self, task: TaskRequest, node: int, room: Res) -> bool:
        # K8 holds here, at the only place that commits: constraints and every dimension.
        return satisfies(self.layout.nodes[node].cmask, task.pc) and fits(task.req, room)

    def _fail(self, req: Request, kind: InconsistencyKind, why: Why) -> Inconsistent:
        return Inconsistent(req.request_id, req.task.task_id, self.lm, kind, why, self.state())

    def _commit(self, req: Request, logical: LogicalNode | None) -> None:
        if req.task.task_id in self.running:
            # A new request id for a task that already runs here would launch it twice.
            raise ValueError(f"task {req.task.task_id} already runs on LM {self.lm}")
        self.free[req.node] = sub(self.free[req.node], req.task.req)
        self._run(Running(req.task, req.gm, req.node, logical))
        q = req.task.queue
        self.usage[q] = add(self.usage[q], req.task.req) if q in self.usage else req.task.req
        self._changed()

    # ---- task ends and state ----

    def end(self, task_id: str) -> Notice:
        """A task finished: its room (a logical node's too) returns to the physical node,
        and its GM gets a prompt delta."""
        return self._release(self.running[task_id], preempted=False)

    def _release(self, run: Running, preempted: bool) -> Notice:
        del self.running[run.task.task_id]
        self.logical.pop(run.task.task_id, None)
        self.free[run.node] = add(self.free[run.node], run.task.req)
        self.usage[run.task.queue] = sub(self.usage[run.task.queue], run.task.req)
        self._changed()
        return run.gm, TaskEnded(self.lm, self.epoch, self.version, run.task.task_id, run.node,
                                 self.room_of(run.node), preempted)

    def _run(self, run: Running) -> None:
        self.running[run.task.task_id] = run
        if run.logical is not None:
            self.logical[run.task.task_id] = run.logical

    def _changed(self) -> None:
        self.version += 1
        self._state = None

    def adopt(self, task: TaskRequest, gm: int, node: int, logical: bool) -> None:
        """A task this LM launched before a restart or a new layout (rebuilt from the
        master's jobs): recorded as running, unchecked (it already runs)."""
        carved = LogicalNode(node, task.req, gm, task.task_id) if logical else None
        self.free[node] = sub(self.free[node], task.req)
        self._run(Running(task, gm, node, carved))
        q = task.queue
        self.usage[q] = add(self.usage[q], task.req) if q in self.usage else task.req
        self._changed()

    def touch(self) -> None:
        """The real room moved outside this LM (a live master's local jobs, a node's
        report): the next state is built afresh, under a new version."""
        self._changed()

    def fail_over(self) -> None:
        """A standby took over (§IV-D): a new epoch fences requests from GMs that have not
        seen it yet."""
        self.epoch += 1
        self._changed()

    def state(self) -> LMState:
        """The full state every GM may see: built once per version, shared by all answers."""
        if self._state is None:
            logical = tuple(self.logical.values())
            tasks = tuple(TaskOn(r.task.task_id, r.task.queue, r.node, r.task.req)
                          for r in self.running.values()) if self.publish_tasks else ()
            # Only a live master's LM has closed nodes; the simulator's are all open (no loop per state).
            closed = () if self._all_open else tuple(i for i in range(len(self.free)) if not self.schedulable(i))
            self._state = LMState(self.lm, self.epoch, self.version, self._free_now(), logical,
                                  tuple(sorted(self.usage.items())), tasks, closed)
        return self._state

    def _free_now(self) -> tuple[Res, ...]:
        """Every node's free room for a state (the simulator's array engine snapshots an array)."""
        if self.room is not None:
            return tuple(self.room_of(i) for i in range(len(self.free)))
        return tuple(self.free)
