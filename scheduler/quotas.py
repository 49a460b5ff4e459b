"""Queue quotas (README, "Quotas and borrowing"): the queue-file keys and their checks.

    queues:
      ads:
        max: {cpu: 64, memory: 256Gi, gpu: 8}   # the subtree's running tasks never hold more
        borrow_limit: 0.10                      # at most 0.10 of the cluster above its guarantee
        lend_limit: 0.20                        # at most 0.20 of the cluster of its guarantee lent out
        max_running_per_user: 20                # a user's running tasks in the subtree
        max_pending_per_user: 500               # a user's waiting tasks: a submit past it is refused

Like Kueue's borrowingLimit / lendingLimit, borrowing and lending are relative to the
queue's guarantee, which is a fraction of the cluster (tree.guaranteed_share): on every
resource kind the queue's nominal quota is guarantee x the READY capacity. A queue with
`borrow_limit: B` holds at most (guarantee + B) x capacity of each kind; with `lend_limit: L`
the part of its quota above L, max(guarantee - L, 0) x capacity, is kept for its own
subtree: queues outside it start nothing that would eat into the unused part of it.

Pure: the tree, what runs (per leaf queue and user) and the capacity in; "may this start"
and the reason out (scheduler/round.py and scheduler/preemption.py ask, live and in sim)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tcluster.domain.errors import InvalidArgument, ResourceExhausted
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import _ALIASES, CPU, MEMORY, resources_from_mapping
from tcluster.domain.units import format_bytes, format_cpu
from tcluster.scheduler.yamlsrc import Located, Path, YamlConfigError, format_path

QUOTA_KEYS = ("max", "borrow_limit", "lend_limit", "max_running_per_user", "max_pending_per_user")
ANONYMOUS_USER = "anonymous"


@dataclass(frozen=True)
class QueueCaps:
    """One queue's own caps (None: none set). They hold for the queue's whole subtree."""
    max: tuple[tuple[str, float], ...] | None = None   # (kind, amount): only the kinds named are capped
    borrow_limit: float | None = None          # fraction of the cluster above the guarantee
    lend_limit: float | None = None            # fraction of the cluster of the guarantee lent out
    max_running_per_user: int | None = None    # running tasks of one user
    max_pending_per_user: int | None = None    # waiting tasks of one user (checked at submit)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.max, self.borrow_limit, self.lend_limit,
                                           self.max_running_per_user, self.max_pending_per_user))

    def describe(self) -> str:
        """For `tcl queues`-like listings and logs: `max cpu=4 memory=8Gi; borrow_limit 0.1`."""
        parts = []
        if self.max is not None:
            parts.append("max " + " ".join(f"{kind}={_amount(kind, amount)}" for kind, amount in self.max))
        for key in QUOTA_KEYS[1:]:
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key} {value:g}")
        return "; ".join(parts)


def job_user(spec: JobSpec) -> str:
    """Whose job it is for per-user caps: the authenticated submitter (the master sets
    `owner`), else the Unix user it runs as; without either, `anonymous`."""
    return spec.owner or spec.user or ANONYMOUS_USER


def parse_caps(doc: Located, where: Path, body: dict[Any, Any]) -> QueueCaps:
    """The quota keys of one queue's mapping at `where`; YamlConfigError names the line."""
    return QueueCaps(
        _max(doc, (*where, "max"), body.get("max")),
        _fraction(doc, (*where, "borrow_limit"), body.get("borrow_limit")),
        _fraction(doc, (*where, "lend_limit"), body.get("lend_limit")),
        _count(doc, (*where, "max_running_per_user"), body.get("max_running_per_user")),
        _count(doc, (*where, "max_pending_per_user"), body.get("max_pending_per_user")),
    )


def _amount(kind: str, value: float) -> str:
    if kind == MEMORY:
        return format_bytes(value)
    if kind == CPU:
        return format_cpu(value)
    return f"{value:g}"


def _max(doc: Located, where: Path, value: object) -> tuple[tuple[str, float], ...] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise doc.error(where, "must be a mapping of resource amounts, e.g. {cpu: 4, memory: 16Gi, gpu: 2}")
    try:
        amounts = resources_from_mapping(value, format_path(where)).as_dict()
        named = {_ALIASES.get(str(k).strip().lower(), str(k).strip().lower()) for k in value}
        return tuple(sorted((kind, amounts.get(kind, 0.0)) for kind in named))
    except InvalidArgument as exc:
        kind = exc.field.rpartition(".")[2]
        at = (*where, kind) if kind in value else where
        message = str(exc).partition(": ")[2] or str(exc)
        raise YamlConfigError(doc.source, doc.line(at), at, message) from None


def _fraction(doc: Located, where: Path, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise doc.error(where, f"{value!r} must be a fraction of the cluster from 0 to 1 "
                               "(like the guarantee: 0.25 is a quarter of each resource)")
    return float(value)


def _count(doc: Located, where: Path, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise doc.error(where, f"{value!r} must be a whole number of tasks >= 1 (leave it out for no limit)")
    return value


def pending_cap_error(queue: str, user: str, limit: int, waiting: int, asked: int) -> ResourceExhausted:
    """The submit refusal: names the queue, the user, the key and the numbers."""
    return ResourceExhausted(
        f"queue {queue}: user {user} at max_pending_per_user {limit}: {waiting} task(s) already waiting, "
        f"this job adds {asked}; submit again when some have started")
