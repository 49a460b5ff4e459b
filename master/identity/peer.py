"""The edge that reads what TLS verified about a caller."""

from __future__ import annotations

import grpc

from tcluster.master.identity.joining import PeerCert


def peer_cert(context: grpc.aio.ServicerContext) -> PeerCert | None:
    """The client certificate TLS verified on this call, or None (no TLS, or none sent)."""
    auth = context.auth_context() or {}
    pems, names = auth.get("x509_pem_cert") or [], auth.get("x509_common_name") or []
    if not pems:
        return None
    return PeerCert(names[0].decode(errors="replace") if names else "", pems[0])
