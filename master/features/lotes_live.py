"""LoTES in the live master (`--placement lotes`; scheduler/lotes states the contract).

The service owns one LotesLive, as it owns the NodeMatrix. It is memory only and is fed:
- `on_step(applied)` after every applied step (a step listener): a task that starts holding resources
  on a node is `book.started(node, k)`, one that stops (terminal, requeued, LOST, moved)
  is `book.ended(node, k)`; exactly once each, from the task's value before and after;
- `submitted(spec)`: the request joins the sliding window learned classes come from;
- `check()` on every pass of the master's loop: whether a solve is due (no plan yet, a
  machine configuration appeared or vanished, learned class shares drifted); the solve
  runs in an executor, at most one at a time, and is adopted back on the loop, where the
  agents are told their new bins. Between solves the last solution stays in force; with
  no plan (infeasible, scipy missing, no classes yet) the policy decides as anbf.

A task's class is a pure function of its request and the current classes, so nothing is
stored: it is recomputed (and the book recounted) whenever the classes change."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import numpy as np

from tcluster.domain.launch import Launch
from tcluster.master.core.actions import BinTarget
from tcluster.master.core.events import Action, Step, Welcome
from tcluster.master.core.feed import AppliedStep
from tcluster.master.ports import MasterPort
from tcluster.master.settings import MasterSettings
from tcluster.domain.model import JobSpec, NodeState, Task
from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.classes import drift, learn_classes, observed_shares, parse_classes
from tcluster.scheduler.lotes.dispatch import LotesBook
from tcluster.scheduler.lotes.model import Configuration, JobClass
from tcluster.scheduler.lotes.classes import group_configurations
from tcluster.scheduler.lotes.resolve import DEFAULT_DRIFT, Outcome, plan_for
from tcluster.scheduler.nodestate import resource_vector

log = logging.getLogger(__name__)
PER_JOB = 100          # a job of N tasks adds its request min(N, 100) times to the window
INPUTS_EVERY_S = 0.5   # the ready nodes are regrouped into configurations at most this often
NO_NODES = "no nodes are ready"


def holder(task: Task | None) -> str | None:
    """The node a task holds resources on, or None."""
    return task.node if task is not None and task.state.holds_resources and task.node else None


def book_moves(before: Mapping[str, Task | None], after: Mapping[str, Task]) -> Iterable[tuple[str, str | None, str | None]]:
    """(task id, node it stopped holding on, node it started holding on) for each task of
    a step whose holding changed: PENDING -> STARTING is a start, STARTING/RUNNING -> any
    terminal state, PENDING (requeued, retried) or LOST is an end; RUNNING again is nothing."""
    for task_id, task in after.items():
        was, now = holder(before.get(task_id)), holder(task)
        if was != now:
            yield task_id, was, now


class RequestWindow:
    """The requests of the last `size` submitted tasks, counted by distinct request (a
    job's tasks share one), so shares and k-means inputs cost per distinct request."""

    def __init__(self, size: int = 10_000) -> None:
        self._order: deque[Resources] = deque()
        self.size = size
        self.counts: Counter[Resources] = Counter()
        self.generation = 0

    def add(self, request: Resources, tasks: int = 1) -> None:
        for _ in range(min(tasks, PER_JOB)):
            self._order.append(request)
            self.counts[request] += 1
            if len(self._order) > self.size:
                old = self._order.popleft()
                self.counts[old] -= 1
                if not self.counts[old]:
                    del self.counts[old]
        self.generation += 1

    def __len__(self) -> int:
        return len(self._order)

    def requests(self) -> list[Resources]:
        return list(self._order)


@dataclass
class LotesStatusView:
    fallback: str = ""
    last_solve: str = ""
    solve_seconds: float = 0.0
    solves: int = 0
    solved_at: float = 0.0
    classes: tuple[str, ...] = ()
    classes_source: str = ""


@dataclass(frozen=True)
class NodeLotesView:
    config: str
    target: dict[int, int]
    actual: dict[int, int]
    counted: dict[int, int]


@dataclass
class _Inputs:
    nodes: list[tuple[str, Resources, dict[str, str]]]
    kinds: tuple[str, ...]
    configurations: tuple[Configuration, ...] = ()
    key: tuple = field(default_factory=tuple)


def offline(nodes: Sequence[tuple[str, Resources, Mapping[str, str]]], kinds: Sequence[str],
            classes_text: str | None, classes_source: str, window: Sequence[Resources], k: int, seed: int,
            label: str | None) -> tuple[Outcome, tuple[JobClass, ...]]:
    """Classes (the file, or k-means over the window), then stages 1-2. Runs in an
    executor thread: touches nothing shared. Never raises for a bad instance."""
    try:
        if classes_text is not None:
            classes = parse_classes(classes_text, classes_source, kinds)
        else:
            capacities = np.array([resource_vector(c, kinds) for _, c, _ in nodes], dtype=float)
            largest = capacities.max(axis=0) if len(capacities) else np.ones(len(kinds))
            scale = np.where(largest > 0, largest, 1.0)
            points = [resource_vector(r, kinds) for r in window]
            classes = learn_classes(points, scale, k, random.Random(seed))
    except Exception as error:   # a classes file that no longer parses against these kinds
        return Outcome(None, f"job classes: {error}"), ()
    return plan_for(nodes, kinds, classes, label), classes


class LotesLive:
    def __init__(self, master: MasterPort, book: LotesBook, *, classes_text: str | None = None,
                 classes_source: str = "", k: int = 4, label: str | None = None, drift_threshold: float = DEFAULT_DRIFT,
                 window: int = 10_000, min_interval_s: float = 2.0, seed: int = 0) -> None:
        self.master, self.book = master, book
        self.classes_text, self.k, self.label = classes_text, k, label
        self.drift_threshold, self.min_interval_s, self.seed = drift_threshold, min_interval_s, seed
        self.window = RequestWindow(window)
        self.reported: dict[str, dict[int, int]] = {}          # node -> class mix from its heartbeat
        self.status = LotesStatusView(classes_source=classes_source if classes_text is not None
                                      else f"learned (k-means, k={k}, window {window} tasks)")
        self._class_of: dict[Resources, int | None] = {}
        self._solving: asyncio.Task[None] | None = None
        self._nodes_dirty = True
        self._inputs: _Inputs | None = None
        self._failed_key: tuple | None = None
        self._last_start = -float("inf")
        self._inputs_at = -float("inf")
        self._nodes_changed_at = -float("inf")
        self._settle_since: float | None = None
        self._checked_generation = -1
        if not book.reason or book.reason == "no LoTES plan yet":
            book.reason = "no LoTES plan yet (waiting for nodes" + ("" if classes_text else " and submitted tasks") + ")"

    # ---- classes ----

    def klass(self, resources: Resources) -> int | None:
        """The task's class under the plan in force; None without a plan."""
        if self.book.plan is None:
            return None
        if resources not in self._class_of:
            if len(self._class_of) >= 4096:
                self._class_of.clear()
            vector = resource_vector(resources, self.book.plan.problem.kinds)
            self._class_of[resources] = self.book.classify(vector)
        return self._class_of[resources]

    def _resources(self, job_id: str, step: Step | None = None) -> Resources | None:
        job = (step.jobs.get(job_id) if step is not None else None) or self.master.state.jobs.get(job_id)
        return job.spec.resources if job is not None else None

    # ---- fed by the service ----

    def on_step(self, applied: AppliedStep) -> None:
        """After a step is applied: the book follows the tasks that started or stopped
        holding; a registration, a node's state or a stream attached or lost may change
        the set of ready nodes."""
        step = applied.step
        if step.nodes or applied.reconnected:
            self._nodes_dirty = True
            self._nodes_changed_at = self.master.monotonic()
            if self.book.plan is None and self.book.reason == NO_NODES:
                self.book.reason = "no plan yet (the first solve is due)"
            for name, live in step.live.items():
                if not live.connected:
                    self.reported.pop(name, None)
        for task_id, was, now in book_moves(applied.before, step.tasks):
            resources = self._resources(step.tasks[task_id].job_id, step)
            k = None if resources is None else self.klass(resources)
            if k is None:
                continue
            if was is not None:
                self.book.ended(was, k)
            if now is not None:
                self.book.started(now, k)

    def submitted(self, spec: JobSpec) -> None:
        if self.classes_text is None:
            self.window.add(spec.resources, spec.tasks)

    def heartbeat(self, node: str, class_mix: Mapping[int, int]) -> None:
        self.reported[node] = dict(class_mix)

    def reloaded(self) -> None:
        """The state was rebuilt from disk: recount from it."""
        self._recount()
        self._nodes_dirty = True

    def decorate(self, action: Action) -> Action:
        """Launches carry the task's class; a Welcome carries the node's bin."""
        if isinstance(action, Launch):
            k = self.klass(action.spec.resources)
            return replace(action, lotes_class=-1 if k is None else k)
        if isinstance(action, Welcome):
            return replace(action, bin_target=self.target_for(action.node))
        return action

    # ---- solving ----

    def check(self) -> None:
        """On the loop, cheap: start a solve if one is due and none is running."""
        if self._solving is not None or self.master.monotonic() - self._last_start < self.min_interval_s:
            return
        inputs = self._current_inputs()
        if not inputs.nodes:
            if self.book.plan is None:
                self.book.reason = NO_NODES
            return
        why = self._due(inputs)
        if why is None:
            return
        if self._settling():
            return                    # nodes are still registering: one solve for the whole burst
        if self.book.plan is None and inputs.key == self._failed_key:
            return                    # the same inputs failed already: wait for a change
        self._last_start = self.master.monotonic()
        self._solving = asyncio.get_running_loop().create_task(self._solve(why, inputs), name="lotes-solve")

    def _settling(self) -> bool:
        """A node changed less than settle_s ago (min_interval_s / 2, at most 1 s): wait,
        unless changes have kept coming for 10 s."""
        now = self.master.monotonic()
        settle = min(1.0, self.min_interval_s / 2)
        if now - self._nodes_changed_at >= settle:
            self._settle_since = None
            return False
        if self._settle_since is None:
            self._settle_since = now
        return now - self._settle_since < 10.0

    def _current_inputs(self) -> _Inputs:
        """The ready nodes and their configurations: O(nodes), so recomputed only after a
        node change and at most every INPUTS_EVERY_S (a registration burst costs one pass)."""
        stale = self._nodes_dirty and self.master.monotonic() - self._inputs_at >= INPUTS_EVERY_S
        if stale or self._inputs is None:
            self._inputs_at = self.master.monotonic()
            state = self.master.state
            nodes = [(n.name, n.capacity, dict(n.labels)) for n in sorted(state.nodes.values(), key=lambda n: n.name)
                     if n.state is NodeState.READY and state.connected(n.name)]
            kinds = tuple(state.matrix.kinds)
            configurations = group_configurations(nodes, kinds, self.label) if nodes else ()
            self._inputs = _Inputs(nodes, kinds, configurations)
            self._nodes_dirty = False
        inputs = self._inputs
        shape = frozenset((c.capacity, c.count) for c in inputs.configurations)
        inputs.key = (shape, self.window.generation if self.classes_text is None else 0)
        return inputs

    def _due(self, inputs: _Inputs) -> str | None:
        plan = self.book.plan
        if plan is None:
            if self.classes_text is None and not len(self.window):
                self.book.reason = "no job classes yet: submit tasks to learn them from (or give --lotes-classes)"
                return None
            return "no plan yet"
        planned = {(c.capacity, c.count) for c in plan.problem.configurations}
        now = {(c.capacity, c.count) for c in inputs.configurations}
        if planned != now:
            appeared = len(now - planned)
            vanished = len(planned - now)
            return f"machine configurations changed ({appeared} new or resized, {vanished} gone or resized)"
        if self.classes_text is None and self.window.generation != self._checked_generation:
            self._checked_generation = self.window.generation
            learned = len(plan.problem.classes)
            if learned < self.k and len(self.window.counts) > learned:
                return f"{len(self.window.counts)} distinct requests now, {learned} classes learned (k={self.k})"
            observed = self.observed_shares()
            distance = drift(plan.problem.shares(), observed)
            if distance > self.drift_threshold:
                return f"class proportions drifted by {distance:.2f} (threshold {self.drift_threshold:.2f})"
        return None

    def observed_shares(self) -> np.ndarray:
        labels: list[int] = []
        counts: list[int] = []
        for request, n in self.window.counts.items():
            k = self.klass(request)
            if k is not None:
                labels.append(k)
                counts.append(n)
        return observed_shares(np.repeat(labels, counts).astype(np.int64), self.book.classes)

    async def _solve(self, why: str, inputs: _Inputs) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            outcome, _ = await loop.run_in_executor(
                None, offline, inputs.nodes, inputs.kinds, self.classes_text, self.status.classes_source,
                self.window.requests() if self.classes_text is None else [], self.k, self.seed, self.label)
        except Exception as error:   # a bug in a solve must not stop the master
            log.exception("LoTES solve failed")
            outcome = Outcome(None, f"the solve failed: {error}")
        finally:
            self._solving = None
        seconds = time.perf_counter() - started
        self.adopt(outcome, why, seconds, inputs.key)

    def adopt(self, outcome: Outcome, why: str, seconds: float, key: tuple = ()) -> None:
        """On the loop: the solve's result takes effect; agents hear their new bins."""
        status = self.status
        status.solves += 1
        status.solve_seconds, status.solved_at = seconds, self.master.clock()
        self._class_of.clear()
        if outcome.plan is not None:
            plan = outcome.plan
            self.book.adopt(plan)
            self._recount()
            self._failed_key = None
            status.fallback = ""
            status.classes = tuple(c.name for c in plan.problem.classes)
            notes = f"; {'; '.join(plan.notes)}" if plan.notes else ""
            status.last_solve = (f"solved in {seconds:.3f}s ({why}): {len(plan.problem.configurations)} configurations, "
                                 f"{len(plan.problem.classes)} classes, lambda1 {plan.lambda1:.4g}, "
                                 f"lambda2 {plan.lambda2:.4g}{notes}")
            log.info("lotes: %s", status.last_solve)
        else:
            self.book.drop(outcome.reason)
            self._recount()
            self._failed_key = key
            status.fallback = f"lotes falls back to anbf: {outcome.reason}"
            status.classes = ()
            status.last_solve = f"no plan after {seconds:.3f}s ({why}): {outcome.reason}"
            log.warning("%s (solve took %.3fs; %s)", status.fallback, seconds, why)
        self.master.broadcast(self.target_for)
        self.master.kick()

    def _recount(self) -> None:
        state = self.master.state
        running: list[tuple[str, int]] = []
        for node, task_ids in state.by_node.items():
            for task_id in task_ids:
                task = state.task(task_id)
                resources = None if holder(task) != node else self._resources(task.job_id)  # type: ignore[union-attr]
                k = None if resources is None else self.klass(resources)
                if k is not None:
                    running.append((node, k))
        self.book.recount(running)

    # ---- views ----

    def target_for(self, node: str) -> BinTarget:
        target = self.book.targets.get(node)
        classes: dict[str, int] = {}
        if self.book.plan is not None:
            for task in self.master.state.tasks_on(node):
                resources = self._resources(task.job_id)
                k = None if resources is None else self.klass(resources)
                classes[task.id] = -1 if k is None else k
        if target is None:
            return BinTarget("", {}, classes, self.book.reason if self.book.plan is None else "")
        j, counts = target
        config = self.book.plan.problem.configurations[j].name   # type: ignore[union-attr]
        return BinTarget(config, {k: int(n) for k, n in enumerate(counts.tolist()) if n}, classes, "")

    def node_view(self, node: str) -> NodeLotesView:
        target = self.book.targets.get(node)
        config, counts = "", {}
        if target is not None and self.book.plan is not None:
            config = self.book.plan.problem.configurations[target[0]].name
            counts = {k: int(n) for k, n in enumerate(target[1].tolist()) if n}
        counted = self.book.running.get(node)
        return NodeLotesView(config, counts, dict(self.reported.get(node, {})),
                             {} if counted is None else {k: int(n) for k, n in enumerate(counted.tolist()) if n})

    def status_view(self) -> LotesStatusView:
        self.status.fallback = "" if self.book.plan is not None else f"lotes falls back to anbf: {self.book.reason}"
        return replace(self.status)

    @property
    def solving(self) -> bool:
        return self._solving is not None


def make_lotes(master: MasterPort, settings: MasterSettings, placement: object) -> LotesLive | None:
    """The service's LoTES wiring when the placement policy is lotes, else None."""
    book = getattr(placement, "book", None)
    if not isinstance(book, LotesBook):
        return None
    path = settings.lotes_classes_file
    text = path.read_text(encoding="utf-8") if path is not None else None   # main checked it parses
    return LotesLive(master, book, classes_text=text, classes_source=str(path or ""),
                     k=settings.lotes_k, label=settings.lotes_config_label, drift_threshold=settings.lotes_drift,
                     window=settings.lotes_window, min_interval_s=settings.lotes_min_interval_s, seed=settings.seed)
