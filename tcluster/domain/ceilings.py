"""Node limits are ceilings: a job may lower an agent's `--pids-max` and `--log-max`,
never raise them.

Two lines of defence, both here as pure functions:
- the master refuses at submit a job that asks more than every node allows
  (`refusal`), from the ceilings each agent states when it registers;
- the agent clamps what reaches the kernel and the log writer to its own settings
  (`effective`), whatever the master said: an old master, or a node whose ceiling is
  below the ask, still cannot lift the operator's limit.

A ceiling of 0 is "not stated": an agent older than this field (the master then relies
on that agent's clamp alone), or for the log cap an agent with no cap at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tcluster.domain.errors import InvalidArgument


@dataclass(frozen=True)
class Ceilings:
    pids_max: int = 0          # per task; 0: not stated
    log_max_bytes: int = 0     # per log file before rotation; 0: not stated / no cap


# (JobSpec field, the agent flag that sets its ceiling)
LIMITS: tuple[tuple[str, str], ...] = (("pids_max", "tcl-agent --pids-max"),
                                       ("log_max_bytes", "tcl-agent --log-max"))


def effective(asked: int, ceiling: int) -> int:
    """What the agent applies: the job's value when it lowers the agent's, else the
    agent's (0 from the job means "the agent's default"; a 0 ceiling means no cap)."""
    if ceiling <= 0:
        return max(asked, 0)
    return asked if 0 < asked <= ceiling else ceiling


def asks_of(spec: object) -> dict[str, int]:
    """The limits a job spec sets (> 0), by field: what a node's ceilings must allow."""
    return {field: value for field, _ in LIMITS if (value := int(getattr(spec, field, 0) or 0)) > 0}


def allows(ceilings: Ceilings, asks: dict[str, int]) -> bool:
    """A node takes the job's limits as asked: each at most its ceiling (0: not stated,
    so the master cannot tell and leaves it to the agent's clamp)."""
    return all(getattr(ceilings, field) <= 0 or asked <= getattr(ceilings, field) for field, asked in asks.items())


def short_of(asks: dict[str, int], ready: Iterable[Ceilings]) -> str:
    """A pending reason: no ready node allows the asks (larger ceilings only on nodes down)."""
    stated = list(ready)
    for field, flag in LIMITS:
        asked = asks.get(field, 0)
        if asked and not any(allows(c, {field: asked}) for c in stated):
            largest = max((getattr(c, field) for c in stated), default=0)
            return f"no ready node allows {field} {asked} (the largest ready allows {largest}, {flag})"
    return ""


def refusal(asks: dict[str, int], nodes: Iterable[Ceilings]) -> InvalidArgument | None:
    """The error for the first limit asked above every node's stated ceiling; None when
    some node allows each ask, when no node is known yet (the job waits), or when any
    node did not state that ceiling (only its own clamp can say)."""
    asked_above_zero = [(field, flag, asks[field]) for field, flag in LIMITS if asks.get(field, 0) > 0]
    if not asked_above_zero:    # most jobs: no pass over the nodes at all (one per Submit, issue 38)
        return None
    known = list(nodes)
    for field, flag, asked in asked_above_zero:
        stated = [getattr(c, field) for c in known]
        if not stated or any(s <= 0 for s in stated):
            continue
        largest = max(stated)
        if asked > largest:
            return InvalidArgument(field, f"{asked} is above every node's ceiling (largest: {largest}, {flag}); "
                                          f"ask at most {largest}, or 0 for the node's own value")
    return None
