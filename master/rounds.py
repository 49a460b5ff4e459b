"""The master service's background loop (a part of MasterService, split off for size):
the scheduling round (fairness, placement, preemption as pure calls on the state), the
tick, and the wake-up that a submit or a freed node gives it."""

from __future__ import annotations

import asyncio
import logging
import time

from tcluster.errors import Unavailable
from tcluster.master.core.events import Launch, Place, Tick
from tcluster.master.core.pinning import pinned_round
from tcluster.scheduler.round import schedule_round
from tcluster.scheduler.windows import Windows
from tcluster.master import nodeops
from tcluster.timeouts import wait_for

log = logging.getLogger(__name__)
TICK_INTERVAL_S = 0.5


class Rounds:
    """Mixed into MasterService; uses its state, policies, _do and _send."""

    # ---- background ----

    def kick(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Scheduling rounds on every change (and every schedule_interval_s), plus timeouts."""
        last_tick = 0.0
        while True:
            try:
                await wait_for(self._wake.wait(), min(self.settings.schedule_interval_s, TICK_INTERVAL_S))
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if not self.acting():     # a master that lost its lease decides nothing more
                self.after_round()    # (its loop still turns: not a hang)
                continue
            try:
                if self.monotonic() - last_tick >= TICK_INTERVAL_S:
                    last_tick = self.monotonic()
                    self.tick()
                if self.lotes is not None:
                    self.lotes.check()   # starts a solve off the loop when one is due
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

    def schedule_once(self) -> list[Launch]:
        state = self.state
        pinned, pinned_places, pinned_reasons = pinned_round(state)
        if pinned_places:
            self._do(Place(tuple(pinned_places)))
        pending = {job_id: state.tasks[job_id] for job_id in sorted(state.pending_jobs) if job_id not in pinned}
        if not pending:
            if pinned_reasons:
                self.state.set_pending_reasons(pinned_reasons)
            return []
        started = time.perf_counter()
        windows = nodeops.windows(state, self.clock())
        result = schedule_round(state.jobs, pending, state.matrix, self.fairness, self.placement, self.rng,
                                self._eligible, queues=self.queues, reservations=self.reservations, now=self.clock(),
                                views=[v for v in state.pending_views() if v.job_id not in pinned], windows=windows)
        step = self._do(Place(tuple((t.id, node) for t, node in result.placements)))[0] if result.placements else None
        self.reservations = result.holds or self.reservations
        self.state.set_pending_reasons({**self._preempt(result.pending_reasons, windows), **pinned_reasons})
        if self.observer is not None:
            self.observer.on_round(time.perf_counter() - started, len(result.placements))
        return [a for a in step.actions if isinstance(a, Launch)] if step else []

    def _preempt(self, reasons: dict[str, str], windows: Windows | None = None) -> dict[str, str]:
        """--preemption: after the round's placements (master/preempting.py)."""
        if self.preemption is None or not self.state.pending_jobs:
            return reasons
        return self.preemption.after_round(self.state, self.queues, self.reservations, self._eligible, self.clock(),
                                           lambda event: self._do(event), reasons, windows)
