"""A packing study: every metric of Verma et al. for one (policy, order) on one cluster and
workload, as plain JSON-ready values. Same seed, same output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tcluster.pack.metrics import compaction, hole_filling, inflation, monte_carlo, utilization
from tcluster.pack.schedule import PackJob, Packer
from tcluster.scheduler.views import NodeSpec

METRICS = ("util", "holes", "inflation", "mc", "compaction")
DEFAULT_UNITS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Settings:
    order: str = "arrival"
    tau: float = 0.004             # Fig. 4's 0.4% pending threshold
    trials: int = 11
    mu: int = 1
    seed: int = 0
    units: tuple[float, ...] = DEFAULT_UNITS
    metrics: tuple[str, ...] = METRICS


def study(machines: Sequence[NodeSpec], jobs: Sequence[PackJob], policy: str, settings: Settings) -> dict[str, Any]:
    packer = Packer(machines, policy, settings.order)
    base = packer.run(jobs, None, settings.seed)
    kinds = shown_kinds(packer.kinds)
    out: dict[str, Any] = {
        "policy": policy, "order": settings.order, "machines": len(machines), "tasks": base.requested,
        "pending": base.pending, "utilization": _per_kind(packer.kinds, kinds, utilization(base)),
    }
    if "holes" in settings.metrics:
        out["hole_filling"] = [{"unit": u, **_per_kind(packer.kinds, kinds, hole_filling(base, u, packer.median))}
                               for u in settings.units]
    if "inflation" in settings.metrics:
        out["inflation"] = {}
        for name, vertical, only_conforming in (("horizontal_all", False, False), ("horizontal_conforming", False, True),
                                                ("vertical_all", True, False), ("vertical_conforming", True, True)):
            result = inflation(packer, jobs, vertical, only_conforming, settings.tau, settings.seed)
            out["inflation"][name] = {"factor": result.factor,
                                      "curve": [{"f": f, "pending": p, **_per_kind(packer.kinds, kinds, u)}
                                                for f, p, u in result.curve]}
    if "mc" in settings.metrics:
        added, util = monte_carlo(packer, jobs, True, settings.tau, settings.seed)
        out["monte_carlo"] = {"clones": added, "utilization": _per_kind(packer.kinds, kinds, util)}
    if "compaction" in settings.metrics:
        c = compaction(machines, jobs, policy, settings.order, settings.tau, settings.trials, settings.mu, settings.seed)
        out["compaction"] = ({"p90": c.p90, "min": c.low, "max": c.high, "sizes": list(c.sizes), "expanded": c.expanded}
                             if c.feasible else {"p90": None, "why": f"more than tau pending even at {2 ** c.expanded}x"})
    fallback = getattr(packer.chooser, "fallback", None)
    if fallback:
        out["note"] = fallback
    return out


def shown_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """cpu and memory, and gpu where the machines have GPUs (whole devices: a study of a GPU
    cluster is about them); other declared kinds stay out of the report."""
    return tuple(k for k in kinds if k in ("cpu", "memory", "gpu"))


def _per_kind(order: Sequence[str], kinds: Sequence[str], values: Any) -> dict[str, float]:
    """`values` in the matrix's kind `order`, reported for `kinds`."""
    return {kind: float(v) for kind, v in zip(order, list(values)) if kind in kinds}
