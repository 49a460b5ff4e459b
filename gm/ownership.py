"""Who serves which federated queue, from etcd's facts (pure: values in, decisions out).

Facts: the queue map (queue -> home GM), the live members (those whose lease-bound member
key stands), and the takeover claims (queue -> the GM that claimed it, each key bound to
its claimant's lease). Rules (docs/federation-gm.md, "Membership in etcd"):

- a queue whose home GM is alive is served by its home: a GM that comes back reclaims
  its home queues at once, and the claimant then drops its claim;
- a queue whose home is dead is served by the GM holding a live claim on it;
- with no live claim, the lowest-index live GM claims it (one etcd transaction, created
  only if the claim key is absent, so two GMs never both hold it);
- a queue whose home is dead and that nobody has claimed yet has no server: a Submit is
  answered UNAVAILABLE until the claim lands (within a watch round-trip)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Member:
    name: str
    index: int
    address: str


@dataclass(frozen=True)
class Facts:
    queue_map: Mapping[str, str]         # queue -> home GM name
    alive: Mapping[str, Member]          # name -> live member
    claims: Mapping[str, str]            # queue -> claimant GM name


def owner_of(facts: Facts, queue: str) -> str | None:
    """The GM that serves `queue` now; None when nobody does (unknown queue, or home
    dead and not yet claimed by a live GM)."""
    home = facts.queue_map.get(queue)
    if home is None:
        return None
    if home in facts.alive:
        return home
    claimant = facts.claims.get(queue)
    return claimant if claimant in facts.alive else None


def taker(facts: Facts) -> str | None:
    """The live GM that claims orphaned queues: the lowest index (name breaks ties)."""
    if not facts.alive:
        return None
    return min(facts.alive.values(), key=lambda m: (m.index, m.name)).name


def to_claim(facts: Facts, me: str) -> list[str]:
    """Queues `me` should claim now: home dead, no live claim, and `me` is the taker."""
    if me not in facts.alive or taker(facts) != me:
        return []
    return sorted(q for q, home in facts.queue_map.items()
                  if home not in facts.alive and facts.claims.get(q) not in facts.alive)


def to_release(facts: Facts, me: str) -> list[str]:
    """Claims `me` holds that are no longer needed: the home is alive again, or the queue
    left the map."""
    return sorted(q for q, who in facts.claims.items()
                  if who == me and (facts.queue_map.get(q) is None or facts.queue_map[q] in facts.alive))


def served_by(facts: Facts, me: str) -> list[str]:
    return sorted(q for q in facts.queue_map if owner_of(facts, q) == me)


def taken_over(facts: Facts, me: str) -> list[str]:
    """Queues `me` serves for a dead home GM."""
    return [q for q in served_by(facts, me) if facts.queue_map[q] != me]
