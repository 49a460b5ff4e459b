"""Node identity on the master: the Join flow (token + CSR -> node certificate) and the
guard on agent streams (the certificate names the node; a revoked one is cut off).

No gRPC here: the servicers hand in the token, the CSR and the peer's certificate."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from tcluster.domain.errors import PermissionDenied, Unauthenticated
from tcluster.master.core.actions import Registration
from tcluster.domain.nodelabels import admitted
from tcluster.master.identity.records import AuthStore, check_token
from tcluster.security.jointoken import parse_join_token
from tcluster.security.certs import check_node_name, node_of_cert
from tcluster.security.pki import MasterPki, issue_node_cert, load_csr, serial_of_cert

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JoinResult:
    node: str
    cert_pem: bytes
    ca_pem: bytes
    labels: dict[str, str]
    agent_port: int
    agent_addresses: tuple[str, ...] = ()     # HA: every live master's agent address


class NodeJoin:
    """Trades a valid join token and a CSR for a node certificate, once per token."""

    def __init__(self, pki: MasterPki, auth: AuthStore, agent_port: int,
                 agent_addresses: Callable[[], list[str]] = lambda: [],
                 clock: Callable[[], float] = time.time) -> None:
        self.pki, self.auth, self.agent_port, self.clock = pki, auth, agent_port, clock
        self.agent_addresses = agent_addresses

    def join(self, token_text: str, node: str, csr_pem: bytes) -> JoinResult:
        token = parse_join_token(token_text)
        if token.fingerprint != self.pki.fingerprint:
            raise Unauthenticated(f"the token pins the CA {token.fingerprint}, but this master's CA is "
                                  f"{self.pki.fingerprint}: it was made for another cluster")
        check_node_name(node)
        load_csr(csr_pem, node)              # checked before the token is spent
        self.auth.check_name_free(node)      # a clear refusal before anything is signed
        now = self.clock()
        check_token(self.auth.token(token.token_id), token.secret, now)   # refused before signing
        cert_pem = issue_node_cert(self.pki, csr_pem, node)
        labels = self.auth.admit(token, node, serial_of_cert(cert_pem), now)
        log.info("node %s joined with join token %s", node, token.token_id)
        return JoinResult(node, cert_pem, self.pki.ca_pem, labels, self.agent_port, tuple(self.agent_addresses()))


@dataclass(frozen=True)
class PeerCert:
    """What TLS verified about the agent on the other end (the CA signed it)."""

    common_name: str
    cert_pem: bytes


class AgentLink(Protocol):
    """An agent's open stream as the guard sees it (the service's master/links.py AgentLink)."""

    node: str

    def close(self) -> None: ...


class NodeGuard:
    """Admits an agent stream only for the node its certificate names, while that
    certificate is live; streams of revoked certificates are found by sweep()."""

    def __init__(self, auth: AuthStore) -> None:
        self.auth = auth
        self._serials: dict[AgentLink, str] = {}
        self._revoked: set[AgentLink] = set()

    def admit(self, peer: PeerCert | None, reg: Registration) -> tuple[Registration, str]:
        """The registration to accept and the cert serial: labels from the join token win,
        and reserved `tcluster.io/` labels the node may not claim are dropped."""
        if peer is None:
            raise Unauthenticated("this port needs a node certificate (mutual TLS); join first: "
                                  "tcl-agent join --master HOST:PORT --token TOKEN")
        node = node_of_cert(peer.cert_pem)
        if node is None or peer.common_name != f"node:{node}":
            raise PermissionDenied(f"certificate {peer.common_name[:60]!r} is not a node certificate")
        if reg.node != node:
            raise PermissionDenied(f"this certificate is node {node}'s; it cannot register as {reg.node[:60]!r}")
        serial = serial_of_cert(peer.cert_pem)
        status = self.auth.cert_status(serial)
        if status is None:
            raise PermissionDenied(f"node {node}'s certificate (serial {serial}) was revoked or is unknown to "
                                   "this master; join again with a new token")
        labels, dropped = admitted(dict(reg.labels), status[1])   # NodeRestriction: see tcluster/domain/nodelabels.py
        if dropped:
            log.warning("node %s: ignoring labels only its join token may set: %s", node, ", ".join(dropped))
        return replace(reg, labels=tuple(sorted(labels.items()))), serial

    def track(self, link: AgentLink, serial: str) -> None:
        self._serials[link] = serial

    def forget(self, link: AgentLink) -> bool:
        """Stops watching a link; True if it was closed because its certificate was revoked."""
        self._serials.pop(link, None)
        if link in self._revoked:
            self._revoked.discard(link)
            return True
        return False

    def sweep(self) -> list[AgentLink]:
        """Closes and returns the open links whose certificate has been revoked since."""
        if not self._serials:
            return []
        revoked = self.auth.revoked_serials()
        cut = [link for link, serial in self._serials.items() if serial in revoked and link not in self._revoked]
        for link in cut:
            log.warning("node %s: its certificate was revoked; closing its stream", link.node)
            self._revoked.add(link)
            link.close()
        return cut

