"""gm/ownership.py: who serves a federated queue from etcd's facts, and who claims what."""

from __future__ import annotations

import pytest

from tcluster.gm.ownership import Facts, Member, owner_of, taken_over, taker, to_claim, to_release

G0, G1, G2 = Member("gm0", 0, "h:1"), Member("gm1", 1, "h:2"), Member("gm2", 2, "h:3")
QMAP = {"a": "gm0", "b": "gm1", "c": "gm2"}


def facts(alive: list[Member], claims: dict[str, str] | None = None, qmap: dict[str, str] = QMAP) -> Facts:
    return Facts(qmap, {m.name: m for m in alive}, claims or {})


@pytest.mark.parametrize("alive, claims, queue, owner", [
    ([G0, G1, G2], {}, "b", "gm1"),                     # home alive: home
    ([G0, G1, G2], {"b": "gm0"}, "b", "gm1"),           # home back: home wins over a leftover claim
    ([G0, G2], {}, "b", None),                          # home dead, unclaimed: nobody yet
    ([G0, G2], {"b": "gm2"}, "b", "gm2"),               # home dead: the live claimant
    ([G0], {"b": "gm2"}, "b", None),                    # the claimant died too
    ([G0, G1, G2], {}, "zz", None),                     # not in the map
    ([], {}, "a", None),
])
def test_owner_of(alive, claims, queue, owner) -> None:
    assert owner_of(facts(alive, claims), queue) == owner


@pytest.mark.parametrize("alive, claims, me, claim", [
    ([G0, G1, G2], {}, "gm0", []),                      # nothing orphaned
    ([G0, G2], {}, "gm0", ["b"]),                       # lowest index alive takes over
    ([G0, G2], {}, "gm2", []),                          # ... and only it
    ([G1, G2], {}, "gm1", ["a"]),
    ([G2], {}, "gm2", ["a", "b"]),
    ([G0, G2], {"b": "gm2"}, "gm0", []),                # a live claim stands (no flapping)
    ([G0, G2], {"b": "gm1"}, "gm0", ["b"]),             # a dead claimant's claim is taken
    ([G1, G2], {}, "gm0", []),                          # not alive itself: claims nothing
])
def test_to_claim(alive, claims, me, claim) -> None:
    assert to_claim(facts(alive, claims), me) == claim


@pytest.mark.parametrize("alive, claims, me, release", [
    ([G0, G1], {"c": "gm0"}, "gm0", []),                # home still dead: keep
    ([G0, G1, G2], {"c": "gm0"}, "gm0", ["c"]),         # home back: hand it back
    ([G0, G1], {"c": "gm1"}, "gm0", []),                # another's claim: not ours to drop
    ([G0, G1], {"zz": "gm0"}, "gm0", ["zz"]),           # the queue left the map
])
def test_to_release(alive, claims, me, release) -> None:
    assert to_release(facts(alive, claims), me) == release


def test_taker_is_deterministic_and_taken_over_lists_served_queues_of_dead_homes() -> None:
    assert taker(facts([G2, G1])) == "gm1"
    assert taker(facts([])) is None
    f = facts([G0, G2], {"b": "gm0"})
    assert taken_over(f, "gm0") == ["b"]
    assert taken_over(f, "gm2") == []
