"""Client certificates mapped to users at the GM (issue 35, part D).

A GM with `--client-ca` requires every caller to show a certificate of that CA (mutual TLS).
A certificate whose CN is `user:NAME` names user NAME of the LMs, as a bearer token does: the
GM asks its LMs who NAME is (GMAuthenticate with `cert_user`, the first LM that knows the user
wins) and applies the same rules (queue grants, owner-only Get and Cancel). Each Place of the
job's tasks carries the name (`PlaceRequest.cert_user`), and the LM applies its own gate,
ceilings and run_as for its user of that name, so the task runs as that user's mapping.

The LM trusts the GM's check of the certificate, as a Kubernetes API server trusts its
front proxy's user header: only a GM (a GM certificate of that LM, or its admin token) may
send a name, and only the name of a user the LM already has. A GM certificate (CN `gm:NAME`)
shown to a GM names nobody and is refused. A certificate identity is not forwarded to another
GM (a forwarded name would let any GM certificate speak for any user): such a caller talks to
the GM that serves the queue."""

from __future__ import annotations

import re

import grpc

from tcluster.security.gmcert import gm_of_common_name

USER_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")     # as `tcl-master user add` (master/identity/accounts.py)

USER_CN_PREFIX = "user:"
# How a certificate user is kept in gm/owners.py's token column: never a bearer token (those
# start with "tcl"), so a stored row says which of the two its Places carry.
STORED_PREFIX = "cert-user:"
GM_CERT_NAMES_NOBODY = ("a GM certificate names no user and cannot submit, read or cancel jobs; "
                        "call with a user's token or a user certificate (CN user:NAME)")
NOT_FORWARDED = ("is served by GM {gm!r}: a certificate identity is not forwarded between GMs; "
                 "call GM {gm!r} directly with your certificate (or use a token)")


def peer_common_name(context: grpc.aio.ServicerContext) -> str:
    """The CN of the client certificate TLS verified on this call; "" without one."""
    names = (context.auth_context() or {}).get("x509_common_name") or []
    return names[0].decode(errors="replace") if names else ""


def user_of_common_name(common_name: str) -> str | None:
    """The user a verified certificate's CN names (`user:NAME`), or None."""
    if not common_name.startswith(USER_CN_PREFIX):
        return None
    name = common_name[len(USER_CN_PREFIX):]
    return name if USER_NAME.match(name) else None


def is_gm_certificate(common_name: str) -> bool:
    return gm_of_common_name(common_name) is not None


def owner_secret(token: str, cert_user: str) -> str:
    """What the owner row keeps for a job's Places: the token, or the certificate's user."""
    return token if token else STORED_PREFIX + cert_user


def place_identity(stored_value: str) -> tuple[str, str]:
    """(user_token, cert_user) for a Place, from an owner row's stored value."""
    if stored_value.startswith(STORED_PREFIX):
        return "", stored_value[len(STORED_PREFIX):]
    return stored_value, ""
