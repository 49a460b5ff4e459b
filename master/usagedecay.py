"""--usage-half-life in the master: when to accrue the decayed usage, and the tree the
fairness round sees (scheduler/decay.py has the arithmetic). The ledger is state
(MasterState.decayed_usage): it changes only through the AccrueUsage transition, which
the store keeps (SQLite's meta table, etcd's state/usage/decayed), so a restarted
master or a new leader carries on from the last accrual."""

from __future__ import annotations

from tcluster.master.core.state import MasterState
from tcluster.scheduler.decay import DecayLedger, accrue, ledger_keys, usage_weights
from tcluster.scheduler.queues import QueueTree

MIN_INTERVAL_S, MAX_INTERVAL_S = 1.0, 30.0


class UsageDecay:
    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        # Often enough that the order follows usage within 1 % of a half-life; a write per accrual.
        self.interval_s = min(max(half_life_s / 100, MIN_INTERVAL_S), MAX_INTERVAL_S)
        self._made: tuple[QueueTree | None, DecayLedger | None, QueueTree | None] = (None, None, None)

    def due(self, ledger: DecayLedger, now: float) -> bool:
        return ledger.at is None or now - ledger.at >= self.interval_s

    def accrued(self, state: MasterState, tree: QueueTree, now: float) -> DecayLedger:
        """The ledger at `now`, the allocations held now taken as held since the last
        accrual. After a longer gap (a restart, a standby taking over) the gap only
        decays: what ran then is not known, so at most one interval of it counts."""
        ledger, capacity = state.decayed_usage, state.matrix.total_capacity()
        if ledger.at is not None and now - ledger.at > 2 * self.interval_s:
            ledger = accrue(ledger, now - self.interval_s, {}, capacity, self.half_life_s)
        held = ledger_keys(tree, state.user_held.view())
        return accrue(ledger, now, held, capacity, self.half_life_s)

    def fair_tree(self, tree: QueueTree, ledger: DecayLedger) -> QueueTree:
        """The tree with usage weights; the same object while the weights stay the same
        (the MCH state is rebuilt when it changes)."""
        made_from, made_with, made = self._made
        if tree is made_from and ledger is made_with and made is not None:
            return made
        fresh = usage_weights(tree, ledger)
        if made is not None and tree is made_from and fresh == made:
            fresh = made
        self._made = (tree, ledger, fresh)
        return fresh
