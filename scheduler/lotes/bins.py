"""Stage 2's bins (Tran et al., section 4.2): the non-dominated multisets of job classes
that fit one machine of a configuration by their EXPECTED requests.

A bin is non-dominated when no class of K^j (the classes Stage 1 gave this configuration)
can be added without breaking some capacity. The printed Algorithm 1 never resets its
`nextBin` flag and also emits dominated bins (on Figure 5 it adds (1,1)); this is a
depth-first search over K^j that keeps a leaf only if it is maximal, so it emits exactly
the non-dominated bins, each once. Enumeration is bounded: past `cap` bins it stops and
says so (the caller logs it); the bins found so far are all valid columns for the LP."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-12   # capacities are compared with this slack (normalized units)
DEFAULT_BIN_CAP = 200_000


@dataclass(frozen=True)
class BinSet:
    counts: np.ndarray      # (bins, classes) int: N_ik, zero outside K^j
    truncated: bool         # the cap was hit: the set is a subset of the non-dominated bins


def nondominated_bins(capacity: np.ndarray, requests: np.ndarray, support: tuple[int, ...],
                      cap: int = DEFAULT_BIN_CAP) -> BinSet:
    """capacity (L,), requests (K, L); only the classes in `support` are used. With no class
    that fits at all the single bin is the empty one: eq. (9) needs a column per configuration."""
    fitting = [k for k in support if np.all(requests[k] <= capacity + TOLERANCE)]
    # Bigger classes first (footnote 2): the search tree is narrower near the root.
    order = sorted(fitting, key=lambda k: (-float(np.max(requests[k] / np.maximum(capacity, TOLERANCE))), k))
    found: list[list[int]] = []
    counts = [0] * len(requests)
    truncated = _search(capacity.astype(float), requests, order, 0, counts, found, cap)
    if not found:
        found.append([0] * len(requests))
    return BinSet(np.array(found, dtype=np.int64).reshape(len(found), len(requests)), truncated)


def _search(left: np.ndarray, requests: np.ndarray, order: list[int], depth: int,
            counts: list[int], found: list[list[int]], cap: int) -> bool:
    """Depth-first over the classes in `order`, most copies first. True if the cap was hit."""
    if depth == len(order):
        if not any(np.all(requests[k] <= left + TOLERANCE) for k in order):   # maximal
            found.append(list(counts))
        return len(found) >= cap
    k = order[depth]
    most = _copies(left, requests[k])
    # The last class always takes all it can: fewer would leave room for it (dominated).
    fewest = most if depth == len(order) - 1 else 0
    for copies in range(most, fewest - 1, -1):
        counts[k] = copies
        if _search(left - copies * requests[k], requests, order, depth + 1, counts, found, cap):
            counts[k] = 0
            return True
    counts[k] = 0
    return False


def _copies(left: np.ndarray, request: np.ndarray) -> int:
    """How many copies of `request` fit in `left` (a zero request never limits)."""
    need = request > 0
    if not need.any():
        return 0   # a request of nothing cannot fill a machine; the class never counts
    return int(np.floor(np.min((left[need] + TOLERANCE) / request[need])))
