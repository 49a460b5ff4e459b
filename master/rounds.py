"""The master service's background loop (composed into MasterService): the scheduling
round (fairness, placement, preemption as pure calls on the state), the tick, and the
wake-up that a submit or a freed node gives it. It owns the round's policies and its
reservations; it reads the state and queues through the MasterPort and changes them
only through `do`."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable

import numpy as np

from tcluster.domain.errors import Unavailable
from tcluster.master import nodeadmin
from tcluster.master.core.events import AccrueUsage, Launch, Place, Tick
from tcluster.master.usagedecay import UsageDecay
from tcluster.scheduler.queues import QueueTree
from tcluster.master.core.pinning import pinned_round
from tcluster.master.features.quotas_live import running_holdings
from tcluster.master.ports import Do, MasterPort, Plugins
from tcluster.master.settings import MasterSettings
from tcluster.scheduler.backfill import RunningEnds, backfilled_note, latest_end
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.capbook import has_caps
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.reservations import PREEMPT_HOLD_SLACK_S, Reservations
from tcluster.scheduler.round import schedule_round
from tcluster.scheduler.windows import Windows, time_limit_of
from tcluster.daemonkit.timeouts import wait_for

log = logging.getLogger(__name__)
TICK_INTERVAL_S = 0.5


class Rounds:
    """`master` is read (state, queues, clocks); `do` changes the state; `acting`:
    whether this master still leads; `plugins`: LoTES, preemption and the observer."""

    def __init__(self, settings: MasterSettings, master: MasterPort, do: Do, acting: Callable[[], bool],
                 placement: PlacementPolicy, plugins: Plugins) -> None:
        self.settings, self.master, self._do, self._acting = settings, master, do, acting
        self.placement, self.plugins = placement, plugins
        self.fairness = make_fairness(settings.fairness)
        self.rng = random.Random(settings.seed)
        self.eligible = EligibleCache()
        self.reservations = Reservations(settings.reserve_after_s, settings.preempt_grace_s + PREEMPT_HOLD_SLACK_S)
        self.decay = UsageDecay(settings.usage_half_life_s) if settings.usage_half_life_s else None
        self._wake = asyncio.Event()
        # Called after each loop iteration that did not fail (systemd's watchdog: master/app/reload.py).
        self.after_round: Callable[[], None] = lambda: None

    def kick(self) -> None:
        self._wake.set()

    def restore(self, now: float) -> None:
        """The state was loaded (or reloaded after a failed write): preemption's holds follow it."""
        if self.plugins.preemption is not None:
            self.plugins.preemption.restore(self.master.state, self.reservations, now)

    async def run(self) -> None:
        """Scheduling rounds on every change (and every schedule_interval_s), plus timeouts."""
        last_tick = 0.0
        while True:
            try:
                await wait_for(self._wake.wait(), min(self.settings.schedule_interval_s, TICK_INTERVAL_S))
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if not self._acting():     # a master that lost its lease decides nothing more
                self.after_round()     # (its loop still turns: not a hang)
                continue
            try:
                if self.master.monotonic() - last_tick >= TICK_INTERVAL_S:
                    last_tick = self.master.monotonic()
                    self.tick()
                if self.plugins.lotes is not None:
                    self.plugins.lotes.check()   # starts a solve off the loop when one is due
                self.schedule_once()
            except Unavailable as error:     # StoreError, NotLeader: the caller already logged why
                log.error("%s", error)
            except Exception:  # a bug in one round must not stop the master
                log.exception("scheduling round failed")
            else:
                self.after_round()

    def tick(self) -> None:
        step, _ = self._do(Tick())
        if step.tasks:
            self.kick()
        state, now = self.master.state, self.master.clock()
        if self.decay is not None and self.decay.due(state.decayed_usage, now):
            self._do(AccrueUsage(self.decay.accrued(state, self.master.queues, now)))
            self.kick()    # the order may have changed

    def schedule_once(self) -> list[Launch]:
        state = self.master.state
        pinned, pinned_places, pinned_reasons = pinned_round(state)
        if pinned_places:
            self._do(Place(tuple(pinned_places)))
        pending = {job_id: state.tasks[job_id] for job_id in sorted(state.pending_jobs) if job_id not in pinned}
        if not pending:
            if pinned_reasons:
                state.set_pending_reasons(pinned_reasons)
            return []
        started = time.perf_counter()
        now = self.master.clock()
        windows = nodeadmin.windows(state, now)
        result = schedule_round(state.jobs, pending, state.matrix, self.fairness, self.placement, self.rng,
                                self.eligible, queues=self._fair_tree(), reservations=self.reservations,
                                now=self.master.clock(), windows=windows, held=state.user_held.view(),
                                views=[v for v in state.pending_views() if v.job_id not in pinned],
                                holdings=running_holdings(state) if has_caps(self.master.queues) else (),
                                caps_tree=self.master.queues,
                                running_ends=self._running_ends(now) if self.settings.backfill else None)
        notes = tuple((job, backfilled_note(holder)) for job, holder in sorted(result.backfilled.items()))
        step = self._do(Place(tuple((t.id, node) for t, node in result.placements), notes))[0] \
            if result.placements else None
        self.reservations = result.holds or self.reservations
        state.set_pending_reasons({**self._preempt(result.pending_reasons, windows), **pinned_reasons})
        if self.plugins.observer is not None:
            self.plugins.observer.on_round(time.perf_counter() - started, len(result.placements))
        return [a for a in step.actions if isinstance(a, Launch)] if step else []

    def _running_ends(self, now: float) -> RunningEnds:
        """For backfill: the latest end of each task on the nodes held for a waiting job."""
        state, view = self.master.state, self.master.state.matrix.view()
        ends: dict[str, list[tuple[float | None, np.ndarray]]] = {}
        for node in self.reservations.holders():
            for task in state.tasks_on(node, ordered=False):
                job = state.jobs.get(task.job_id)
                vector = None if job is None else view.request_vector(job.spec.resources)
                if job is not None and vector is not None:
                    ends.setdefault(node, []).append((latest_end(task.started_at or None, time_limit_of(job.spec), now), vector))
        return ends

    def _fair_tree(self) -> QueueTree:
        """The tree fairness sees: with --usage-half-life, weights follow decayed usage
        (master/usagedecay.py); preemption keeps the file's tree."""
        if self.decay is None:
            return self.master.queues
        return self.decay.fair_tree(self.master.queues, self.master.state.decayed_usage)

    def _preempt(self, reasons: dict[str, str], windows: Windows | None = None) -> dict[str, str]:
        """--preemption: after the round's placements (master/features/preempting.py)."""
        preemption, state = self.plugins.preemption, self.master.state
        if preemption is None or not state.pending_jobs:
            return reasons
        return preemption.after_round(state, self.master.queues, self.reservations, self.eligible,
                                      self.master.clock(), self._do, reasons, windows)
