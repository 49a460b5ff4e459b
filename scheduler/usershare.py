"""The user level inside a leaf queue (`share: users`, the default).

A leaf that shares by users has one child per user (weight 1), and each user's jobs hang
under it. A user's share is the dominant share of everything its tasks hold in that
leaf, the jobs with nothing left to place included: that is what makes splitting work
into many jobs gain nothing (a finished job's siblings would otherwise restart from 0).
Among one user's jobs the order is today's: the lowest running x mu / weight first. A job
with no user (a scenario job without `user:`) is a user of its own, as before.

`HeldIndex` keeps what each (leaf, user) holds, updated as tasks take and give back room
(the master's state keeps one); `held_of` counts it from scratch (the simulator)."""

from __future__ import annotations

from typing import Iterable, Mapping

from tcluster.domain.resources import Resources
from tcluster.scheduler.views import JobView

UserKey = tuple[str, str]          # (leaf queue path, user)
Held = Mapping[UserKey, Resources]


def user_of(owner: str, user: str) -> str:
    """Who a job counts for: its owner (the token's user), else the Unix user it runs as."""
    return owner or user


def held_from_views(views: Iterable[JobView]) -> dict[UserKey, Resources]:
    """What the waiting jobs themselves hold, per (leaf, user): the fallback when the
    caller keeps no index (jobs with nothing to place are then not counted)."""
    held: dict[UserKey, Resources] = {}
    for view in views:
        if view.user and view.running:
            key = (view.queue, view.user)
            held[key] = held.get(key, Resources()) + view.allocated
    return held


def held_of(rows: Iterable[tuple[str, str, Resources, int]]) -> dict[UserKey, Resources]:
    """(queue, user, one task's request, tasks holding room) per job -> held per (leaf, user)."""
    held: dict[UserKey, Resources] = {}
    for queue, user, demand, running in rows:
        if user and running:
            held[(queue, user)] = held.get((queue, user), Resources()) + demand.times(running)
    return held


class HeldIndex:
    """Per (leaf, user): the room its tasks hold and how many tasks hold it. A tally back
    at zero tasks restarts from an exact zero, so float error never piles up."""

    def __init__(self) -> None:
        self._held: dict[UserKey, Resources] = {}
        self._tasks: dict[UserKey, int] = {}

    def add(self, queue: str, user: str, demand: Resources) -> None:
        key = (queue, user)
        self._held[key] = self._held.get(key, Resources()) + demand
        self._tasks[key] = self._tasks.get(key, 0) + 1

    def remove(self, queue: str, user: str, demand: Resources) -> None:
        key = (queue, user)
        count = self._tasks.get(key, 0) - 1
        if count <= 0:
            self._held.pop(key, None)
            self._tasks.pop(key, None)
            return
        self._tasks[key] = count
        self._held[key] = (self._held[key] - demand).clamp_nonnegative()

    def view(self) -> Mapping[UserKey, Resources]:
        return self._held

    def tasks(self, key: UserKey) -> int:
        return self._tasks.get(key, 0)
