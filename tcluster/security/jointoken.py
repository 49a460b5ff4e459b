"""Join tokens as the operator passes them around: `tcl1.<CA sha256 hex>.<id>.<secret>`
(kubeadm/k3s style). The CA part lets the agent authenticate the master before it sends
anything; id and secret are presented once, over that verified TLS."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tcluster.domain.errors import InvalidArgument
from tcluster.security.bootstrap import normalize_fingerprint

TOKEN_PREFIX = "tcl1"
_TOKEN_ID = re.compile(r"^[0-9a-f]{12}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{20,64}$")


@dataclass(frozen=True)
class JoinTokenText:
    fingerprint: str          # sha256:<hex> of the cluster CA
    token_id: str
    secret: str

    def __str__(self) -> str:
        return f"{TOKEN_PREFIX}.{self.fingerprint.removeprefix('sha256:')}.{self.token_id}.{self.secret}"

    def __repr__(self) -> str:   # tokens reach logs only through mistakes: never with the secret
        return f"JoinTokenText({self.fingerprint!r}, {self.token_id!r}, secret=...)"


def parse_join_token(text: str, field: str = "token") -> JoinTokenText:
    parts = text.strip().split(".")
    if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
        raise InvalidArgument(field, "a join token reads tcl1.<CA sha256>.<id>.<secret> "
                                     "(from `tcl-master join-token create`)")
    try:
        fingerprint = normalize_fingerprint(parts[1])
    except ValueError as error:
        raise InvalidArgument(field, f"the CA part: {error}") from None
    if not _TOKEN_ID.match(parts[2]) or not _SECRET.match(parts[3]):
        raise InvalidArgument(field, "the id or secret part is malformed; copy the whole token again")
    return JoinTokenText(fingerprint, parts[2], parts[3])
