"""Who calls tcl-gm, and what they may do (issue 35: one identity model from user to task).

A GM is secure when it dials any LM with a GM certificate (`--lm-tls`) or an admin token
(`--token`): its callers then need a bearer token (`authorization: Bearer <token>`, what
`tcl login` stores) of a user of the LMs. The GM asks its LMs who the token names
(LocalManagerService.GMAuthenticate, in --lms order, the first that knows it wins) and keeps
the answer AUTH_CACHE_S seconds, so a removed user is refused within that. It then applies
the master's rules (tcluster.security.authz): Submit needs a grant on the queue, and only
admins choose `--user`; Get and Cancel are the owner's or an admin's; List shows a user their
own jobs. The token goes with every Place of the job's tasks, so each LM applies its own
run_as, gate and ceilings (master/edge/federation_users.py): a GM certificate alone never
names a user. An insecure GM (plaintext LMs, dev) treats every caller as an admin, as an
insecure master does.
A client certificate (CN user:NAME, `--client-ca`) names a user as a token does: gm/certusers.py."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Iterable

import grpc

from tcluster.gm.certusers import GM_CERT_NAMES_NOBODY, is_gm_certificate, peer_common_name, user_of_common_name
from tcluster.gm.port import ServicePort
from tcluster.security.authz import ANONYMOUS, Caller, Decision, Policy, SubmitJob, decide
from tcluster.v1 import federation_pb2, federation_pb2_grpc

AUTH_CACHE_S = 30.0        # a token's user is asked of the LMs again after this long
AUTH_TIMEOUT_S = 5.0
NO_TOKEN = "no token: this GM's LMs are secure; log in to an LM with `tcl login` (or set TCL_TOKEN) and send it"
UNKNOWN = "the token is not known to any LM of this GM (removed, or a user of another cluster?)"


class AuthError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Identity:
    caller: Caller
    token: str           # "" on an insecure GM, or for a certificate's user
    cert_user: str = ""  # the user a client certificate named (CN user:NAME), when no token was sent


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def may_submit(caller: Caller, queue: str, run_as: str, weight: float) -> Decision:
    """The master's Submit rule, without the LM queue's weight ceiling (each LM applies it)."""
    return decide(caller, SubmitJob(queue, run_as, weight, float("inf")), Policy())


def may_touch(caller: Caller, owner: str) -> bool:
    """Get and Cancel: the owner's or an admin's (an insecure GM's jobs have no owner)."""
    return caller.admin or owner == caller.name


class GMAuth:
    def __init__(self, port: ServicePort) -> None:
        self.port = port
        self.secure = bool(port.s.lm_tls or port.s.token)
        self._cache: dict[str, tuple[float, Caller]] = {}

    async def identify(self, context: grpc.aio.ServicerContext) -> Identity:
        """The caller; AuthError UNAUTHENTICATED without a token some LM knows."""
        if not self.secure:
            return Identity(ANONYMOUS, "")
        token = bearer(context.invocation_metadata())
        if token:
            return Identity(await self._cached(federation_pb2.GMAuthRequest(token=token)), token)
        common_name = peer_common_name(context)
        user = user_of_common_name(common_name)
        if user is not None:
            return Identity(await self._cached(federation_pb2.GMAuthRequest(cert_user=user)), "", user)
        if is_gm_certificate(common_name):
            raise AuthError(grpc.StatusCode.PERMISSION_DENIED, GM_CERT_NAMES_NOBODY)
        raise AuthError(grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)

    async def _cached(self, request: federation_pb2.GMAuthRequest) -> Caller:
        key = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < AUTH_CACHE_S:
            return hit[1]
        caller = await self._ask_lms(request)
        if len(self._cache) > 10_000:      # bounded: tokens are few; a flood of bad ones is never cached
            self._cache.clear()
        self._cache[key] = (now, caller)
        return caller

    def forget(self) -> int:
        """Drop every cached answer (SIGHUP, gm/main.py): a user removed or changed at the LMs
        is asked of them again at the next call, not up to AUTH_CACHE_S later. How many."""
        dropped = len(self._cache)
        self._cache.clear()
        return dropped

    async def _ask_lms(self, request: federation_pb2.GMAuthRequest) -> Caller:
        unreachable = 0
        for link in self.port.links:
            for addr in link.tour():
                stub = federation_pb2_grpc.LocalManagerServiceStub(self.port.channel(addr))
                try:
                    answer = await stub.GMAuthenticate(request, timeout=AUTH_TIMEOUT_S, metadata=self._metadata())
                except grpc.aio.AioRpcError as e:
                    if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                        break              # this LM does not know it: the next LM may
                    unreachable += 1
                    continue               # a standby or a dead master: its next master
                if answer.secure:
                    return Caller(answer.user, answer.admin, answer.unix_user, tuple(answer.grants))
                break                      # an insecure LM names nobody: ask a secure one
        if unreachable:
            raise AuthError(grpc.StatusCode.UNAVAILABLE, "no LM answered who this token names; retry")
        raise AuthError(grpc.StatusCode.UNAUTHENTICATED, UNKNOWN if request.token else
                        f"user {request.cert_user!r} of your certificate is not a user of any LM of this GM")

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.port.s.token}"),) if self.port.s.token else ()
