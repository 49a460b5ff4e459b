"""Which labels a node may give itself (NodeRestriction), as tables."""

from __future__ import annotations

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.nodelabels import admitted, check_declared

PINNED = {"rack": "r1", "tcluster.io/zone": "z1"}


@pytest.mark.parametrize("declared, labels, dropped", [
    ({"disk": "ssd"}, {"disk": "ssd", **PINNED}, ()),                           # its own keys: declared
    ({"rack": "r9"}, PINNED, ()),                                               # the token's value wins
    ({"tcluster.io/zone": "z9"}, PINNED, ()),                                   # pinned reserved key: the token's
    ({"tcluster.io/gpu": "a100"}, PINNED, ("tcluster.io/gpu",)),                # reserved, not pinned: dropped
    ({"tcluster.io/docker": "true", "tcluster.io/netns": "true"},               # detected features: the agent's
     {"tcluster.io/docker": "true", "tcluster.io/netns": "true", **PINNED}, ()),
    ({"tcluster.iox/a": "b"}, {"tcluster.iox/a": "b", **PINNED}, ()),           # only the exact prefix
])
def test_a_joined_node_gets_its_own_labels_minus_reserved_then_the_tokens(
        declared: dict[str, str], labels: dict[str, str], dropped: tuple[str, ...]) -> None:
    assert admitted(declared, PINNED) == (labels, dropped)


@pytest.mark.parametrize("labels, ok", [
    ({"rack": "r1", "disk": "ssd"}, True),
    ({"tcluster.io/docker": "true"}, False),     # the agent sets it from what it finds, not the operator
    ({"tcluster.io/gpu": "a100"}, False),        # the join token pins those
])
def test_an_agents_labels_flag_may_not_use_the_reserved_prefix(labels: dict[str, str], ok: bool) -> None:
    if ok:
        check_declared(labels)
    else:
        with pytest.raises(InvalidArgument, match=r"^--labels: 'tcluster.io/\w+' is reserved: keys under tcluster.io/"):
            check_declared(labels)
