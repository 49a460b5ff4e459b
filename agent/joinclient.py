"""`tcl-agent join`: pin the CA from the token, make a key and CSR, trade them for a node
certificate over TLS verified with that CA, and save the joined state.

Nothing is sent before the master has shown the pinned CA; the key never leaves the node."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tcluster.agent.joinstate import (
    JoinedState, NodeCredentials, agent_address, is_joined, load_joined, save_joined,
)
from tcluster.daemonkit.leaders import MasterTour, join_addresses, parse_addresses, standby_hint
from tcluster.security.bootstrap import fetch_pinned_ca
from tcluster.security.channel import TLS_OPTIONS
from tcluster.security.jointoken import parse_join_token
from tcluster.security.certs import ca_fingerprint, check_node_name, node_of_cert
from tcluster.security.nodekeys import make_node_csr, signed_by
from tcluster.v1 import join_pb2, join_pb2_grpc

JOIN_TIMEOUT_S = 30.0


class JoinError(Exception):
    """The join did not happen; the message says why (and nothing was saved)."""


class JoinUnavailable(JoinError):
    """This master cannot take the join now (a standby, or going down): try another."""

    def __init__(self, message: str, leader: str) -> None:
        super().__init__(message)
        self.leader = leader    # the client address a standby named, or ""


@dataclass(frozen=True)
class JoinOutcome:
    state: JoinedState
    state_dir: Path


def _refuse_rejoin(state_dir: Path) -> None:
    if not is_joined(state_dir):
        return
    try:
        loaded = load_joined(state_dir)
        node = loaded[0].node if loaded else "?"
    except Exception:
        node = "?"
    raise JoinError(f"{state_dir} already holds node {node}'s identity; to join again, revoke it on the master "
                    f"(`tcl-master node revoke {node}`) and remove {state_dir}/joined.json and {state_dir}/pki")


async def _call_join(master: str, ca_pem: bytes, token: str, node: str, csr_pem: bytes) -> join_pb2.JoinResponse:
    creds = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    async with grpc.aio.secure_channel(master, creds, options=TLS_OPTIONS) as channel:
        try:
            return await join_pb2_grpc.NodeJoinStub(channel).Join(
                join_pb2.JoinRequest(token=token, node=node, csr_pem=csr_pem), timeout=JOIN_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            message = f"the master at {master} refused the join: {error.code().name}: {error.details()}"
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                raise JoinUnavailable(message, standby_hint(error) or "") from None
            raise JoinError(message) from None


def _check_response(response: join_pb2.JoinResponse, ca_pem: bytes, node: str) -> None:
    """The master answered over verified TLS; still, keep only what fits what we asked."""
    if bytes(response.ca_pem).strip() != ca_pem.strip():
        raise JoinError("the master answered with a different CA than the one the token pins")
    if not signed_by(bytes(response.cert_pem), ca_pem) or node_of_cert(bytes(response.cert_pem)) != node:
        raise JoinError(f"the master's certificate is not a node certificate for {node} from the pinned CA")
    if not 0 < response.agent_port < 65536:
        raise JoinError(f"the master named no usable agent port ({response.agent_port})")


@dataclass(frozen=True)
class JoinRequest:
    token: str
    node: str
    csr_pem: bytes = field(repr=False)


async def _join_any(masters: tuple[str, ...], pin: str, request: JoinRequest) -> tuple[bytes, join_pb2.JoinResponse]:
    """(CA, answer) from the first master that takes the join: one that cannot be reached or
    cannot take it now passes it on (to the leader it names, if any). A CA that is not the
    pinned one, or a refusal, ends the join."""
    tour = MasterTour(masters)
    last: Exception | None = None
    for address in tour:
        try:
            ca_pem = await asyncio.to_thread(fetch_pinned_ca, address, pin, JOIN_TIMEOUT_S)
            return ca_pem, await _call_join(address, ca_pem, request.token, request.node, request.csr_pem)
        except OSError as error:
            last = error
        except JoinUnavailable as error:
            last = error
            tour.prefer(error.leader)
    assert last is not None
    raise last


async def join(master: str, token_text: str, node: str, state_dir: Path) -> JoinOutcome:
    """The whole join; raises JoinError, PinMismatch, InvalidArgument or OSError, saving nothing then."""
    token = parse_join_token(token_text, "--token")
    check_node_name(node, "--node")
    masters = parse_addresses(master, "--master")
    _refuse_rejoin(state_dir)
    key_pem, csr_pem = make_node_csr(node)
    ca_pem, response = await _join_any(masters, token.fingerprint, JoinRequest(token_text.strip(), node, csr_pem))
    _check_response(response, ca_pem, node)
    master = join_addresses(masters)     # every master is kept: later starts use the whole list
    # HA masters name every master's agent address; otherwise each dialled host at the agent port.
    agents = join_addresses(tuple(response.agent_addresses)) if response.agent_addresses else \
        agent_address(master, response.agent_port)
    state = JoinedState(master=master, agent_address=agents, node=node,
                        ca_fingerprint=ca_fingerprint(ca_pem), labels=dict(response.labels))
    save_joined(state_dir, state, NodeCredentials(ca_pem, bytes(response.cert_pem), key_pem))
    return JoinOutcome(state, state_dir)
