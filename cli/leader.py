"""Finding the leading master among `--master a:7070,b:7070,c:7070` (docs/ha.md).

Each call tries the last leader this process knew, then the list in order. An address
that cannot be reached at all, or a standby that knows no leader, passes the call to the
next; a standby's `tcl-leader` hint is followed at once, even off the list. These are
the only failures retried: in both nothing was done, so even a Submit is safe to send again.

When a whole round finds no leader, the finder waits (short backoff) for up to
`wait_leader_s` and then gives up with NoLeaderError naming every master and its answer.
One address that cannot be reached fails at once with gRPC's own error, as before HA."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import grpc

from tcluster.cli.options import DEFAULT_WAIT_LEADER_S
from tcluster.daemonkit.leaders import MasterTour, standby_hint

T = TypeVar("T")
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 1.0

# gRPC's own wording when no connection was made at all. An UNAVAILABLE the master sends
# on purpose (e.g. an agent it must reach is down) carries its own details instead.
_TRANSPORT_FAILURE = re.compile(
    r"failed to connect|connection refused|resolving|resolution|lookup|socket closed"
    r"|connections to all backends failing|no route to host|connect failed|handshake",
    re.IGNORECASE,
)
# The leader each list of masters last had in this process (a later call starts there).
_last_leader: dict[tuple[str, ...], str] = {}


def error_details(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """(code, details) of a grpc error, or of anything that offers code() and details()."""
    code_of, details_of = getattr(error, "code", None), getattr(error, "details", None)
    code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    details = details_of() if callable(details_of) else ""
    return code, details or code.name


def is_transport_failure(error: grpc.RpcError) -> bool:
    if isinstance(error, NoLeaderError):   # its message may quote a transport failure
        return False
    code, details = error_details(error)
    return code == grpc.StatusCode.UNAVAILABLE and bool(_TRANSPORT_FAILURE.search(details))


@dataclass(frozen=True)
class Answer:
    """What one master said when it was asked during a round."""

    address: str
    said: str


class NoLeaderError(grpc.RpcError):
    """No master of the list leads (or none could be reached) within the wait."""

    def __init__(self, answers: tuple[Answer, ...], waited_s: float) -> None:
        super().__init__()
        self.answers = answers
        said = "; ".join(f"{a.address}: {a.said}" for a in answers)
        self.message = f"no master leads (waited {waited_s:g}s for one): {said}"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self.message

    def __str__(self) -> str:
        return self.message


def _said(error: grpc.RpcError, hint: str | None) -> str:
    details = error_details(error)[1]
    if hint is None:
        return f"cannot be reached ({details[:120]})"
    return details[:200]


@dataclass
class _Round:
    answers: list[Answer] = field(default_factory=list)
    standby_answered: bool = False
    last_error: grpc.RpcError | None = None


@dataclass
class LeaderFinder:
    """Runs `attempt(address)` against the leader; see the module doc."""

    masters: tuple[str, ...]
    wait_leader_s: float = DEFAULT_WAIT_LEADER_S
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    @property
    def current(self) -> str:
        """The address the next call tries first."""
        return _last_leader.get(self.masters, self.masters[0])

    def call(self, attempt: Callable[[str], T]) -> T:
        started = self.clock()
        backoff = FIRST_BACKOFF_S
        while True:
            outcome = _Round()
            found, result = self._round(attempt, outcome)
            if found:
                return result  # type: ignore[return-value]
            if len(self.masters) == 1 and not outcome.standby_answered and outcome.last_error is not None:
                raise outcome.last_error     # one master, not there: fail at once, as without HA
            waited = self.clock() - started
            if waited >= self.wait_leader_s:
                raise NoLeaderError(tuple(outcome.answers), self.wait_leader_s)
            self.sleep(min(backoff, self.wait_leader_s - waited))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _round(self, attempt: Callable[[str], T], outcome: _Round) -> tuple[bool, T | None]:
        """Every candidate once: (True, result) from the leader, or (False, None)."""
        tour = MasterTour((self.current, *self.masters))
        for address in tour:
            try:
                result = attempt(address)
            except grpc.RpcError as error:
                hint = standby_hint(error)
                if hint is None and not is_transport_failure(error):
                    raise          # the master answered: its answer is the command's
                outcome.answers.append(Answer(address, _said(error, hint)))
                outcome.standby_answered |= hint is not None
                outcome.last_error = error
                tour.prefer(hint)
                continue
            _last_leader[self.masters] = address
            return True, result
        return False, None
