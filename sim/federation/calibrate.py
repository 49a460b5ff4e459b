"""Handler times measured on the real GM and LM code (issue 25: "measured handler times",
as the paper's simulator took them from its prototype).

The simulator charges each GM decision and each LM check a handler time. Constants keep a
run deterministic (and the unit tests exact); `measure_handlers` instead runs a sample of
the scenario's own arrivals through a FederationSim and times the real calls with the
wall clock: per request sent, the GM's `decide()` plus its `on_answer()`, and the LM's
`handle()` (check and commit, its state built for the answer). Their medians become the
handler times of the runs that follow. It times the object engine (the GM and LM as the
live daemons run them), whichever engine the runs that follow use. The figures are this
machine's: printed beside the results, never hard-coded, and a run with them is only as
repeatable as they are."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from tcluster.federation.messages import LMNode
from tcluster.sim.federation.sim import FedConfig, FederationSim
from tcluster.sim.federation.workload import Arrival

SAMPLE_ARRIVALS = 3000


@dataclass(frozen=True)
class HandlerTimes:
    gm_s: float          # per request: decide() + on_answer()
    lm_s: float          # per request: handle()
    calls: int           # requests timed

    def describe(self) -> str:
        return (f"handler times measured on this machine over {self.calls:,} requests: "
                f"GM {self.gm_s * 1e6:.0f} us, LM {self.lm_s * 1e6:.0f} us (medians)")


def _timed(fn: Callable[..., Any], into: list[float], clock: Callable[[], float],
           counts: Callable[[Any], bool] = lambda result: True) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        began = clock()
        result = fn(*args)
        if counts(result):
            into.append(clock() - began)
        return result
    return wrapper


def measure_handlers(config: FedConfig, clusters: list[tuple[LMNode, ...]], arrivals: list[Arrival],
                     sample: int = SAMPLE_ARRIVALS, clock: Callable[[], float] = time.perf_counter) -> HandlerTimes:
    """Times the real handlers on the first `sample` arrivals of this draw (same nodes,
    same GMs and LMs): the GM's decisions that sent a request, with the answer's handling,
    and every LM check."""
    # The object engine: the live tcl-gm and LM keep per-node tuples, and these times stand
    # for theirs (the array engine's copies are the simulator's own speed, not the product's).
    sim = FederationSim(replace(config, engine="object"), clusters, arrivals[:sample])
    decide: list[float] = []
    answer: list[float] = []
    check: list[float] = []
    for gm in sim.gms:
        # a decide() that found nothing to try costs the simulator nothing: not counted
        gm.decide = _timed(gm.decide, decide, clock, lambda d: d is not None)   # type: ignore[method-assign]
        gm.on_answer = _timed(gm.on_answer, answer, clock)      # type: ignore[method-assign]
    for lm in sim.lms:
        lm.handle = _timed(lm.handle, check, clock)             # type: ignore[method-assign]
    sim.simulate()
    if not check or not decide or not answer:
        raise ValueError("no request was made in the calibration sample; give more tasks")
    return HandlerTimes(_median(decide) + _median(answer), _median(check), len(check))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def with_handlers(config: FedConfig, times: HandlerTimes) -> FedConfig:
    return replace(config, gm_handler_s=times.gm_s, lm_handler_s=times.lm_s)
