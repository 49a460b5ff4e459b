"""Which node labels a node may give itself (Kubernetes' NodeRestriction, for tcluster).

Placement constraints trust node labels, so a node that could claim any label could draw
jobs (and their specs and environments) meant for other nodes. The rules:
- keys under `tcluster.io/` are tcluster's: an agent states only the features it detects
  itself (`tcluster.io/docker`, `tcluster.io/netns`: what its runtime can do;
  `tcluster.io/memory-limit-required`: what its operator allows); every other
  `tcluster.io/` key comes only from the operator, pinned in the node's join token;
- a key the join token pinned always has the token's value, whatever the node says;
- any other key is the node's own declaration (`tcl-agent --labels`), as is its capacity:
  the master takes both as declared and caps neither (cordon a node you do not trust)."""

from __future__ import annotations

from typing import Mapping

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import DOCKER_LABEL, MEMORY_LIMIT_LABEL, NETNS_LABEL

RESERVED_PREFIX = "tcluster.io/"
DETECTED = frozenset({DOCKER_LABEL, NETNS_LABEL, MEMORY_LIMIT_LABEL})   # an agent says these of itself, from what it finds


def check_declared(labels: Mapping[str, str], flag: str = "--labels") -> None:
    """The operator's `--labels` on an agent: no reserved key (detected or token-pinned only)."""
    for key in labels:
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument(flag, f"{key[:80]!r} is reserved: keys under {RESERVED_PREFIX} are set by the "
                                        "agent from what it detects, or pinned by the join token "
                                        "(tcl-master join-token create --labels); use a key without that prefix")


def admitted(declared: Mapping[str, str], pinned: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The labels a joined node gets: its own minus reserved keys it may not set, then the
    token's pinned labels over them. Also returns the keys dropped (to log)."""
    dropped = tuple(sorted(k for k in declared if k.startswith(RESERVED_PREFIX) and k not in DETECTED
                           and k not in pinned))
    labels = {k: v for k, v in declared.items() if k not in dropped}
    labels.update(pinned)
    return labels, dropped
