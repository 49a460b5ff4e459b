"""When and what to (re-)solve: the offline stages as a pure function of the cluster and
the classes, and the triggers the paper leaves to the operator (section 6: "periodic
re-solving"). The caller runs `plan_for` off its event loop and swaps the result into the
LotesBook; between solves the last solution stays in force."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.classes import drift, group_configurations
from tcluster.scheduler.lotes.model import Configuration, JobClass, LotesUnsolvable, Plan, Problem

DEFAULT_DRIFT = 0.1   # total variation distance between planned and observed class shares


@dataclass(frozen=True)
class Outcome:
    plan: Plan | None
    reason: str          # why there is no plan ("" when there is one)


def plan_for(nodes: Iterable[tuple[str, Resources, Mapping[str, str]]], kinds: Sequence[str],
             classes: Sequence[JobClass], label: str | None = None, fit_fix: bool = True,
             bin_cap: int = 200_000) -> Outcome:
    """Stages 1 and 2 for these nodes and classes; never raises for an unsolvable instance."""
    configurations = group_configurations(nodes, kinds, label)
    if not classes:
        return Outcome(None, "no job classes yet (give --lotes-classes or submit tasks to learn from)")
    try:
        from tcluster.scheduler.lotes.lp import solve   # needs scipy's HiGHS
    except ImportError:
        return Outcome(None, "scipy (HiGHS) is not installed")
    try:
        return Outcome(solve(Problem(tuple(kinds), configurations, tuple(classes), fit_fix, bin_cap)), "")
    except LotesUnsolvable as error:
        return Outcome(None, str(error))


def resolve_reason(plan: Plan | None, configurations: Sequence[Configuration],
                   observed: np.ndarray | None, threshold: float = DEFAULT_DRIFT) -> str | None:
    """Why a new solve is due, or None: no plan yet, a configuration appeared or vanished
    (or changed its machine count: eq. (9) changes), or the observed class proportions
    drifted past `threshold` from the planned ones (learned classes only)."""
    if plan is None:
        return "no plan yet"
    planned = {(c.capacity, c.count) for c in plan.problem.configurations}
    now = {(c.capacity, c.count) for c in configurations}
    if planned != now:
        return "machine configurations changed"
    if observed is not None and len(observed) == len(plan.problem.classes):
        distance = drift(plan.problem.shares(), observed)
        if distance > threshold:
            return f"class proportions drifted by {distance:.2f} (threshold {threshold:.2f})"
    return None
