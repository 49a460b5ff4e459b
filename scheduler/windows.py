"""Maintenance windows in placement (`tcl node maint`): a task starts on a node only if
it cannot still be running when the node's window opens, as Slurm's MAINT reservations
keep backfill from starting jobs whose time limit overlaps them.

A job's time limit is its spec's `time_limit_s` (`tcl submit --time-limit`; 0: none). A job without one may
run for ever, so it starts on no node whose window is not yet over; with one, it starts
where now + limit <= the window's start. Inside the window the node is MAINT and takes
nothing (its schedulable flag is off), so this matters only for windows still ahead."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from tcluster.domain.model import JobSpec
from tcluster.domain.nodeorders import NodeOps, blocks
from tcluster.scheduler.nodestate import NodeMatrix


def time_limit_of(spec: JobSpec) -> float:
    """The job's time limit in seconds; 0 = none (read with getattr: a spec from before
    time limits has none)."""
    return float(getattr(spec, "time_limit_s", 0) or 0)


@dataclass
class Windows:
    """The nodes' windows at one moment (unix seconds); masks are cached per time limit
    for the round that owns this."""
    windows: Mapping[str, NodeOps]
    now: float
    _masks: dict[float, np.ndarray | None] = field(default_factory=dict)

    def blocked(self, spec: JobSpec) -> list[str]:
        limit = time_limit_of(spec)
        return sorted(name for name, ops in self.windows.items() if blocks(ops, self.now, limit))

    def allowed(self, spec: JobSpec, nodes: NodeMatrix) -> np.ndarray | None:
        """Rows where the job may start as far as windows go; None: everywhere."""
        limit = time_limit_of(spec)
        if limit not in self._masks:
            rows = [r for name in self.blocked(spec) if (r := nodes.row(name)) is not None]
            mask = None
            if rows:
                mask = np.ones(len(nodes.names), dtype=bool)
                mask[rows] = False
            self._masks[limit] = mask
        return self._masks[limit]

    def reason(self, spec: JobSpec) -> str:
        """Why the windows keep the job off the nodes they block (for its pending reason)."""
        names = self.blocked(spec)
        if not names:
            return ""
        ops = self.windows[names[0]]
        span = f"from {_clock(ops.maint_start)} to {_clock(ops.maint_end)} UTC"
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        limit = time_limit_of(spec)
        runs = "the job has no time limit" if limit <= 0 else f"its time limit ({limit:g}s) would overlap it"
        return f"node {names[0]}{more} has a maintenance window {span} and {runs}"


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def windows_of(nodes: Mapping[str, NodeOps], now: float) -> Windows | None:
    """None when no node has a window (the usual case: placement pays nothing)."""
    found = {name: ops for name, ops in nodes.items() if ops.has_window and ops.maint_end > now}
    return Windows(found, now) if found else None


__all__ = ["Windows", "time_limit_of", "windows_of"]
