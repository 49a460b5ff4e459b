"""Dashboard sessions on a secure master: the login form trades a user token for a random
session id kept in an HttpOnly, SameSite=Strict cookie, so page scripts never hold the
token and other sites cannot ride on it. The token stays in the master's memory only and
is resolved again on every request, so a user removed with `tcl-master user remove` is
cut off at once. Sessions do not survive a master restart: the browser asks again."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Callable

COOKIE = "tcl_session"
IDLE_S = 12 * 3600.0          # a session unused this long is forgotten
MAX_SESSIONS = 10_000         # the oldest go first: a login storm cannot grow memory without bound


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic, idle_s: float = IDLE_S,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self._clock, self._idle_s, self._max = clock, idle_s, max_sessions
        self._by_id: OrderedDict[str, tuple[str, float]] = OrderedDict()   # id -> (token, last used)

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, token: str) -> str:
        session_id = secrets.token_urlsafe(32)
        self._by_id[session_id] = (token, self._clock())
        while len(self._by_id) > self._max:
            self._by_id.popitem(last=False)
        return session_id

    def token(self, session_id: str) -> str:
        """The session's token, or "" when unknown or idle too long (then forgotten)."""
        found = self._by_id.get(session_id) if session_id else None
        if found is None:
            return ""
        token, last = found
        now = self._clock()
        if now - last > self._idle_s:
            del self._by_id[session_id]
            return ""
        self._by_id[session_id] = (token, now)
        self._by_id.move_to_end(session_id)
        return token

    def close(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)
