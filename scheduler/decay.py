"""Usage that decays (`--usage-half-life`): each queue's and user's past usage, so that
over time siblings' integrated shares even out (Slurm's PriorityDecayHalfLife, Kueue's
usageHalfLifeTime).

Usage is kept per kind as share-seconds: CPU-, memory- and GPU-seconds over the READY
cluster's capacity, integrated over time with exponential decay of the half-life h. A
key's decayed dominant usage is the largest of its kinds. Between two accruals dt apart
with a constant allocation a (shares of each kind):

    u' = u x 2^(-dt/h) + a x (h / ln 2) x (1 - 2^(-dt/h))

which is the exact integral, so accruing often or seldom gives the same usage.

How usage orders siblings: each sibling's weight is multiplied by 2^(-U/S), Slurm's
classic fair-share factor, where U is its fraction of its siblings' decayed usage and S
its fraction of their weights (a user's S: 1 / the users of its leaf). A sibling that
used less than its share gets the larger weight, so it takes freed resources first;
when every sibling used its share, the factors are equal and the split is the weights'.
Exponents are rounded to 1/16 so that the weights change in steps (the MCH state is
rebuilt only then). These weights feed only the fairness round: guarantees and
preemption keep the file's weights and their instantaneous meaning.

Keys: a queue by its path ("ads.prod"), a user by "leaf/user"."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Mapping

from tcluster.domain.resources import Resources
from tcluster.scheduler.queues import QueueNode, QueueTree

KINDS = ("cpu", "memory", "gpu")
FORGET_BELOW = 1e-6        # share-seconds: a key this small is dropped (an idle user fades out)
EXPONENT_STEPS = 16        # 2^(-U/S) in steps of 2^(-1/16), about 4 %
MAX_EXPONENT = 16.0        # the smallest factor is 2^-16: a weight never reaches 0


@dataclass(frozen=True)
class DecayLedger:
    at: float | None = None                                  # wall time of the last accrual; None: never
    usage: Mapping[str, tuple[float, ...]] = field(default_factory=dict)   # key -> share-seconds per KINDS

    def dominant(self, key: str) -> float:
        return max(self.usage.get(key, (0.0,)))


def decay_factor(dt_s: float, half_life_s: float) -> float:
    return float(0.5 ** (max(dt_s, 0.0) / half_life_s))


def accrue(ledger: DecayLedger, now: float, held: Mapping[str, Resources], capacity: Resources,
           half_life_s: float) -> DecayLedger:
    """The ledger at `now`: decayed since ledger.at, plus what `held` (key -> allocation,
    constant since ledger.at) adds over that time."""
    if ledger.at is None:
        return DecayLedger(now, dict(ledger.usage))
    dt = now - ledger.at
    if dt <= 0:
        return ledger
    keep = decay_factor(dt, half_life_s)
    gain = (1.0 - keep) * half_life_s / math.log(2)
    totals = [capacity.get(kind) for kind in KINDS]
    usage: dict[str, tuple[float, ...]] = {}
    for key in set(ledger.usage) | set(held):
        old = ledger.usage.get(key, (0.0,) * len(KINDS))
        alloc = held.get(key)
        new = tuple(
            u * keep + ((alloc.get(kind) / total) * gain if alloc is not None and total > 0 else 0.0)
            for u, kind, total in zip(old, KINDS, totals))
        if max(new) >= FORGET_BELOW:
            usage[key] = new
    return DecayLedger(now, usage)


def ledger_keys(tree: QueueTree, held: Mapping[tuple[str, str], Resources]) -> dict[str, Resources]:
    """(leaf, user) -> allocation into the ledger's keys: each user, and each queue up the
    tree with the sum of what is held below it."""
    out: dict[str, Resources] = {}
    for (leaf, user), alloc in held.items():
        out[f"{leaf}/{user}"] = out.get(f"{leaf}/{user}", Resources()) + alloc
        path: str | None = leaf
        while path:
            out[path] = out.get(path, Resources()) + alloc
            path = tree.parent(path)
    return out


def usage_weights(tree: QueueTree, ledger: DecayLedger) -> QueueTree:
    """The tree with each queue's weight times its fair-share factor, and each user's
    factor as its weight (QueueTree.user_weight); the same tree if no usage is known."""
    if not ledger.usage:
        return tree
    root = _adjusted(tree.root, ledger)
    users: dict[str, float] = {}
    for leaf in tree.leaves:
        prefix = leaf + "/"
        mine = {key: ledger.dominant(key) for key in ledger.usage if key.startswith(prefix)}
        for key, weight in _factors(mine, dict.fromkeys(mine, 1.0)).items():
            users[key] = weight
    return replace(tree, root=root, user_weights=tuple(sorted(users.items())))


def _adjusted(node: QueueNode, ledger: DecayLedger) -> QueueNode:
    if not node.children:
        return node
    usage = {c.path: ledger.dominant(c.path) for c in node.children}
    factors = _factors(usage, {c.path: c.weight for c in node.children})
    children = tuple(replace(_adjusted(c, ledger), weight=factors[c.path]) for c in node.children)
    return replace(node, children=children)


def _factors(usage: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """Per sibling: weight x 2^(-U/S), the exponent rounded to 1/EXPONENT_STEPS."""
    used, weighed = sum(usage.values()), sum(weights.values())
    if used <= 0 or weighed <= 0:
        return dict(weights)
    out = {}
    for key, weight in weights.items():
        exponent = min((usage[key] / used) / (weight / weighed), MAX_EXPONENT)
        out[key] = weight * 2.0 ** (-round(exponent * EXPONENT_STEPS) / EXPONENT_STEPS)
    return out


def encode(ledger: DecayLedger) -> bytes:
    return json.dumps({"at": ledger.at, "kinds": KINDS, "usage": ledger.usage}, sort_keys=True).encode()


def decode(raw: bytes | str | None) -> DecayLedger:
    """What encode wrote; an empty ledger for nothing or a record it cannot read (usage
    restarts from zero: the order, not the jobs, is what it costs)."""
    if not raw:
        return DecayLedger()
    try:
        doc = json.loads(raw)
        kinds = tuple(doc.get("kinds", KINDS))
        usage = {str(k): tuple(float(dict(zip(kinds, v)).get(kind, 0.0)) for kind in KINDS)
                 for k, v in doc["usage"].items()}
        return DecayLedger(None if doc["at"] is None else float(doc["at"]), usage)
    except (ValueError, KeyError, TypeError, AttributeError):
        return DecayLedger()
