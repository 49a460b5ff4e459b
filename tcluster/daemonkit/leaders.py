"""Master address lists and the standby's answer, shared by `tcl`, `tcl-agent` and the
master (docs/ha.md): `--master a:7070,b:7070` names every master of an HA cluster; a
master that does not lead refuses calls with UNAVAILABLE and the trailing metadata
`tcl-leader: ADDR` ("" when no master leads)."""

from __future__ import annotations

import re
from collections import deque
from typing import Iterable, Iterator

import grpc

from tcluster.domain.errors import InvalidArgument

LEADER_METADATA = "tcl-leader"
STANDBY_PREFIX = "this master is a standby"
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


def check_address(address: str, flag: str = "--master") -> str:
    """HOST:PORT (or [v6]:PORT, or a gRPC `unix:` target); raises InvalidArgument naming `flag`."""
    if address.startswith("unix:"):
        return address
    match = _HOST_PORT.match(address.strip())
    if not match or not 0 < int(match.group(2)) < 65536:
        raise InvalidArgument(flag, f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:7070)")
    return address.strip()


def parse_addresses(text: str, flag: str = "--master") -> tuple[str, ...]:
    """`a:7070,b:7070` -> ('a:7070', 'b:7070'), each checked; duplicates dropped, order kept."""
    if text.startswith("unix:"):     # a socket path may hold commas; one target then
        return (text,)
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise InvalidArgument(flag, "no master address given (HOST:PORT, or a comma-separated list)")
    if "" in parts:
        raise InvalidArgument(flag, f"{text[:200]!r} has an empty entry; separate addresses with single commas")
    return tuple(dict.fromkeys(check_address(part, flag) for part in parts))


def join_addresses(addresses: Iterable[str]) -> str:
    return ",".join(addresses)


def standby_hint(error: object) -> str | None:
    """For an error from a call: None unless a standby sent it; else the leader it named
    ("" when no master leads). Works for grpc and grpc.aio errors alike."""
    code = getattr(error, "code", None)
    trailing = getattr(error, "trailing_metadata", None)
    if code is None or trailing is None:
        return None
    if code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for key, value in trailing() or ():
        if key == LEADER_METADATA:
            return value if isinstance(value, str) else value.decode()
    details = getattr(error, "details", lambda: "")() or ""
    return "" if details.startswith(STANDBY_PREFIX) else None


class MasterTour:
    """Every master once, in list order, for a caller that needs the leader now (`tcl`, a
    node's join): a master that names the leader (a standby's hint) sends the tour there
    next, and no address is tried twice, so a stale hint cannot loop. The agent's long-lived
    stream rotates differently (agent/masters.py: round robin with backoff)."""

    def __init__(self, addresses: Iterable[str]) -> None:
        self._queue = deque(addresses)
        self._seen: set[str] = set()

    def __iter__(self) -> Iterator[str]:
        while self._queue:
            address = self._queue.popleft()
            if address not in self._seen:
                self._seen.add(address)
                yield address

    def prefer(self, hint: str | None) -> None:
        """Try this address next (a standby named it the leader); "" or None changes nothing."""
        if hint:
            self._queue.appendleft(hint)
