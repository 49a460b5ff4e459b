"""Conservative backfill, as Slurm's `sched/backfill`: the room a reservation holds
(scheduler/reservations.py: a waiting gang's nodes, a starving job's node) is not left
idle while it grows. Another job may start there only if it cannot delay the job the
room is held for:

- The reservation's earliest start estimate is the moment when enough of the tasks
  running on its nodes will have ended at the latest (each at its start plus its job's
  `--time-limit`) for the held job to fit there: its one task on a starving job's node,
  all of a gang's waiting tasks across the gang's nodes.
- A job starts on that room only if `now + its --time-limit` is before the estimate. A
  job without a time limit may run for ever: it never backfills. If a task the estimate
  would wait for has no time limit, the estimate is unknown and nothing backfills there.

Tasks that start by backfill end before the estimate, so when it comes the held job's
room is as free as without them: the estimate never moves later (it may come earlier, as
tasks end before their limits). A preemption's hold (room being freed for a job) takes
no backfill.

Pure: the running tasks' latest ends, the node view and `now` in, estimates and
decisions out. The caller gives the latest ends of the tasks on the held nodes
(`ends_on`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

EPSILON = 1e-9

# node -> (latest end or None if the task has no time limit, its request over the view's kinds)
RunningEnds = Mapping[str, Sequence[tuple[float | None, np.ndarray]]]


def latest_end(started_at: float | None, time_limit_s: float, now: float) -> float | None:
    """When a running task ends at the latest: None if its job has no time limit. A task
    whose start is not known yet (None: placed, not reported running) counts from now,
    which is never earlier than its real end."""
    if time_limit_s <= 0:
        return None
    return (now if started_at is None else started_at) + time_limit_s


def fits_on(free: np.ndarray, request: np.ndarray) -> np.ndarray:
    """How many tasks of `request` fit in each row of `free` (rows: nodes or moments)."""
    asked = request > 0
    if not asked.any():
        return np.full(len(free), 1 << 30)
    counts: np.ndarray = np.floor(np.min(free[:, asked] / request[asked], axis=1) + EPSILON).astype(np.int64)
    return counts


def earliest_start(size: int, request: np.ndarray, free: Mapping[str, np.ndarray], ends: RunningEnds,
                   now: float) -> float | None:
    """The earliest moment `size` tasks of `request` fit on the nodes of `free` (each
    node's free room now), as the running tasks of `ends` end at their latest: `now` if
    they fit already, None if they fit only after a task without a time limit ends (or
    never). Vectorized over the ends (a gang's nodes may run thousands of tasks): each
    end's node fits some more tasks; the first moment the running total reaches `size`."""
    names = list(free)
    room = np.array([free[n] for n in names], dtype=float).reshape(len(names), len(request))
    fits = fits_on(room, request)
    if int(fits.sum()) >= size:
        return now
    rows = [(end if end is not None else np.inf, node, vector) for node, name in enumerate(names)
            for end, vector in ends.get(name, ())]
    if not rows:
        return None
    at = np.array([r[0] for r in rows], dtype=float)
    node = np.array([r[1] for r in rows], dtype=np.int64)
    freed = np.array([r[2] for r in rows], dtype=float).reshape(len(rows), len(request))
    by_node = np.lexsort((at, node))                  # each node's ends in time order, node after node
    cum = np.cumsum(freed[by_node], axis=0)
    first = np.r_[True, node[by_node][1:] != node[by_node][:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))   # each row's group start
    offset = np.vstack([np.zeros((1, len(request))), cum])[base]              # cumsum before the group
    after = fits_on(room[node[by_node]] + cum - offset, request)
    before = np.where(first, fits[node[by_node]], np.r_[0, after[:-1]])
    gained = np.empty(len(rows), dtype=np.int64)
    gained[by_node] = after - before
    order = np.argsort(at, kind="stable")
    total = int(fits.sum()) + np.cumsum(gained[order])
    reached = np.flatnonzero(total >= size)
    if not len(reached) or not np.isfinite(at[order][reached[0]]):
        return None
    return max(float(at[order][reached[0]]), now)


def may_backfill(now: float, time_limit_s: float, estimate: float | None) -> bool:
    """Whether a job with this --time-limit (0: none) may start on a reservation's room
    that its job needs at `estimate` (None: unknown)."""
    return time_limit_s > 0 and estimate is not None and now + time_limit_s < estimate


@dataclass(frozen=True)
class Hold:
    """One waiting reservation as backfill sees it: the job, its nodes, when it needs them."""
    job_id: str
    nodes: tuple[str, ...]
    estimate: float | None


def estimates(holders: Mapping[str, str], sizes: Mapping[str, tuple[int, np.ndarray | None]],
              rows: Mapping[str, int], free: np.ndarray, ends: RunningEnds, now: float) -> dict[str, Hold]:
    """Each holding job's Hold, from `holders` (node -> job), `sizes` (job -> tasks it
    waits to place together and their request), the view's rows and free room."""
    by_job: dict[str, list[str]] = {}
    for node, job in holders.items():
        by_job.setdefault(job, []).append(node)
    out = {}
    for job, nodes in sorted(by_job.items()):
        size, request = sizes.get(job, (0, None))
        known = [n for n in sorted(nodes) if n in rows]
        estimate = None
        if request is not None and size > 0 and known:
            estimate = earliest_start(size, request, {n: free[rows[n]] for n in known}, ends, now)
        out[job] = Hold(job, tuple(sorted(nodes)), estimate)
    return out


@dataclass(frozen=True)
class Decision:
    """For one job and the round's holds: the held nodes it may start on (each with the
    job that holds it) and the holders it would delay."""
    allowed: dict[str, str]        # node -> the job holding it, which this one ends before
    delays: tuple[str, ...]        # jobs whose room it may not use


def decide(job_id: str, time_limit_s: float, holds: Iterable[Hold], now: float) -> Decision:
    allowed: dict[str, str] = {}
    delays = []
    for hold in holds:
        if hold.job_id == job_id:
            continue
        if may_backfill(now, time_limit_s, hold.estimate):
            allowed.update((node, hold.job_id) for node in hold.nodes)
        else:
            delays.append(hold.job_id)
    return Decision(allowed, tuple(sorted(delays)))


BACKFILLED = "backfilled:"    # the start of a backfilled task's reason


def backfilled_note(holder: str) -> str:
    return f"{BACKFILLED} ends before job {holder} needs the node"


def delay_note(holders: Sequence[str]) -> str:
    return "would delay job " + ", ".join(holders[:4]) + (" …" if len(holders) > 4 else "")
