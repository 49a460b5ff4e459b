"""Heartbeat samples -> history rows, for every sample of a drain at once.

The samples come as the heartbeats' blocks (tcluster.master.core.usageblock), their figures
(the working set included) read into arrays at the decode: the only per-sample Python left
is finding each sample's slot (one dict lookup); the rest is a fixed number of array
operations: the CPU split, the rows in history.TASK's order, and the OOM-kill counter
compared with what was seen. Sans-IO.

The agent derives every rate (agent/rates.py). Agents of the previous version sent no
throttling and I/O rates: for their samples only, the rates come from the counters here,
against the previous sample of the same slot (in this batch or kept from the last one).
Drop the fallback once no such agent can connect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tcluster.master.core.usageblock import RAW_FIELDS, UsageBlock
from tcluster.domain.taskusage import HISTORY_COLUMNS, RATES

CPU, SYS, OOM, AT, WS = map(RAW_FIELDS.index, ("cpu_rate", "cpu_system_rate", "oom_kills", "sampled_at",
                                               "working_set_bytes"))
_RATES = [RAW_FIELDS.index(name) for name in RATES]
# The time and, in RATES' order, the counters whose growth the older agents' rates are
_COUNTERS = [AT] + [RAW_FIELDS.index(n) for n in ("cpu_throttled_seconds", "io_read_bytes", "io_write_bytes")]
# history.TASK's columns, each the raw figure of its name; the CPU split's two are made below
_SPLIT = {"cpu_user": "cpu_rate", "cpu_system": "cpu_system_rate"}
_ROWS = [RAW_FIELDS.index(_SPLIT.get(f.name, f.name)) for f in HISTORY_COLUMNS]
_RATE_ROWS = [_ROWS.index(i) for i in _RATES]


def extract(blocks: Sequence[UsageBlock]) -> np.ndarray:
    """(n, len(RAW_FIELDS)) float64: the RAW figures of every sample of the blocks, in
    order, as float() of the TaskUsage's fields (read at the decode: no per-sample work here)."""
    return np.concatenate([b.raw for b in blocks]) if len(blocks) != 1 else blocks[0].raw


@dataclass
class Derived:
    slots: np.ndarray          # grouped by slot (each slot's samples in arrival order)
    first: np.ndarray          # the first sample of its slot
    times: np.ndarray
    rows: np.ndarray           # (n, 10) float32 in history.TASK's field order
    ooms: list[tuple[int, float, int]]   # (slot, time, new kills)


def group(slots: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(order or None, first, last): how to group samples by slot, keeping each slot's in
    arrival order. A drain usually holds one beat per node, so each slot once: no sort."""
    n = len(slots)
    if n < 2 or np.bincount(slots).max() == 1:
        ones = np.ones(n, dtype=bool)
        return None, ones, ones
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    first, last = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    first[0] = last[-1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    last[:-1] = first[1:]
    return order, first, last


class Counters:
    """Per slot: the previous sample's (time, throttled s, read B, written B) and the OOM
    kills seen, so that an older agent's counters become rates and new kills become events."""

    def __init__(self) -> None:
        self.prev = np.zeros((0, 4))
        self.oom_seen = np.zeros(0)

    def grow(self, capacity: int) -> None:
        extra = capacity - len(self.oom_seen)
        if extra > 0:
            self.prev = np.concatenate([self.prev, np.zeros((extra, 4))])
            self.oom_seen = np.concatenate([self.oom_seen, np.zeros(extra)])

    def reset(self, slot: int) -> None:
        """A new attempt: a new cgroup whose counters start again from zero."""
        self.prev[slot] = 0.0
        self.oom_seen[slot] = 0.0

    def derive(self, slots: np.ndarray, raw: np.ndarray, walls: np.ndarray) -> Derived:
        order, first, last = group(slots)
        if order is not None:
            slots, raw, walls = slots[order], raw[order], walls[order]
        current = raw[:, _COUNTERS]
        times = current[:, 0]
        np.copyto(times, walls, where=times <= 0)
        if order is None:                 # each slot once: its previous sample is the kept one
            prev = self.prev[slots]
        else:
            prev = np.empty_like(current)
            prev[1:] = current[:-1]
            prev[first] = self.prev[slots[first]]
        self.prev[slots[last]] = current[last]
        # The total is cpu_rate (cpuacct.usage / cpu.stat usage_usec, the counter Prometheus
        # sees); the tick-based system figure only splits it.
        system = np.minimum(raw[:, SYS], raw[:, CPU])
        rows = raw[:, _ROWS].astype(np.float32)
        rows[:, 0] = raw[:, CPU] - system
        rows[:, 1] = system
        sent = raw[:, _RATES]
        if (sent < 0).any():              # from an agent of the previous version
            rows[:, _RATE_ROWS] = np.where(sent < 0, _counter_rates(current, prev, times), sent)
        return Derived(slots, first, times, rows, self._new_ooms(slots, raw[:, OOM], times))

    def _new_ooms(self, slots: np.ndarray, ooms: np.ndarray, times: np.ndarray) -> list[tuple[int, float, int]]:
        found = []
        for i in np.flatnonzero(ooms > self.oom_seen[slots]).tolist():   # rare: a loop is fine
            slot, kills = int(slots[i]), ooms[i]
            if kills > self.oom_seen[slot]:
                found.append((slot, float(times[i]), int(kills - self.oom_seen[slot])))
                self.oom_seen[slot] = kills
        return found


def _counter_rates(current: np.ndarray, prev: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The older agents' rates: each counter's growth per second since the slot's previous
    sample (0 for its first, or where time did not advance)."""
    dt = times - prev[:, 0]
    per_s = np.divide(1.0, dt, out=np.zeros(len(times)), where=(prev[:, 0] > 0) & (dt > 0))
    return np.maximum(0.0, current[:, 1:] - prev[:, 1:]) * per_s[:, None]
