"""The master's gate: who is calling (a bearer token -> Caller) and may they (the ACL
table in tcluster.security.authz), with one audit line per decision on the
`tcluster.audit` logger. Tokens never reach a log line.

A master without TLS material has no user directory: every caller is ANONYMOUS, an admin,
which is the behaviour from before users existed (and what `--insecure` means)."""

from __future__ import annotations

import logging
from typing import Iterable

from tcluster.domain.errors import PermissionDenied, Unauthenticated
from tcluster.master.identity.users import NO_TOKEN, UserDirectory
from tcluster.security.authz import ANONYMOUS, Caller, Decision, Policy, audit_line, decide

audit = logging.getLogger("tcluster.audit")
BEARER = "bearer"


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The token of an `authorization: Bearer <token>` metadata entry, or ""."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            return token.strip() if scheme.lower() == BEARER else ""
    return ""


class Gate:
    def __init__(self, policy: Policy, users: UserDirectory | None = None) -> None:
        self.policy = policy
        self.users = users

    @property
    def secure(self) -> bool:
        return self.users is not None

    def caller(self, token: str, peer: str = "", call: str = "") -> Caller:
        """Unauthenticated (audited, never echoing the token) when there is no valid one."""
        if self.users is None:
            return ANONYMOUS
        try:
            return self.users.resolve(token)
        except Unauthenticated as error:
            audit.warning("DENIED unauthenticated %s %s: %s", peer or "caller", call, error if token else NO_TOKEN)
            raise

    def decide(self, caller: Caller, action: object) -> Decision:
        """The decision, with its audit line (either way)."""
        decision = decide(caller, action, self.policy)
        if caller is not ANONYMOUS:     # insecure mode has no identities worth a line per call
            audit.log(logging.INFO if decision.allowed else logging.WARNING, "%s",
                      audit_line(caller, action, decision))
        return decision

    def check(self, caller: Caller, action: object) -> None:
        """PermissionDenied saying what is missing; an audit line either way."""
        decision = self.decide(caller, action)
        if not decision.allowed:
            raise PermissionDenied(decision.why)
