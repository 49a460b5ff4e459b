"""The agent's identity after `tcl-agent join`: STATE_DIR/pki/{ca.crt,node.crt,node.key}
and STATE_DIR/joined.json (master addresses, node name, labels from the token).

The state dir is 0700 and the key 0600: tasks run as other users and must not be able to
read the key and talk to the master as this agent. An agent with joined state only ever
connects with mutual TLS."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tcluster.security.certs import make_private_dir, node_of_cert, write_private

JOINED_FILE = "joined.json"
PKI_DIR = "pki"


class JoinedStateError(Exception):
    """Joined state that cannot be used: the agent stops rather than fall back to plaintext."""


@dataclass(frozen=True)
class JoinedState:
    master: str                 # the client address given to `join` (HA: a comma-separated list)
    agent_address: str          # HOST:agent_port, where the agent stream goes (mutual TLS); HA: a list
    node: str
    ca_fingerprint: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeCredentials:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = field(repr=False)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem, private_key=self.key_pem,
                                            certificate_chain=self.cert_pem)



def is_joined(state_dir: Path) -> bool:
    return (state_dir / JOINED_FILE).exists()


def save_joined(state_dir: Path, state: JoinedState, creds: NodeCredentials) -> None:
    """Writes the credentials first and joined.json last: a half-written join is no join."""
    make_private_dir(state_dir)
    pki = make_private_dir(state_dir / PKI_DIR)
    write_private(pki / "node.key", creds.key_pem)
    write_private(pki / "node.crt", creds.cert_pem)
    write_private(pki / "ca.crt", creds.ca_pem)
    write_private(state_dir / JOINED_FILE, json.dumps(state.__dict__, indent=2, sort_keys=True).encode())


def load_joined(state_dir: Path) -> tuple[JoinedState, NodeCredentials] | None:
    """None if this agent never joined; JoinedStateError if its joined state is unusable."""
    path = state_dir / JOINED_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        state = JoinedState(str(raw["master"]), str(raw["agent_address"]), str(raw["node"]),
                            str(raw["ca_fingerprint"]), {str(k): str(v) for k, v in dict(raw.get("labels", {})).items()})
        pki = state_dir / PKI_DIR
        creds = load_credentials(pki)
    except OSError as error:
        raise JoinedStateError(f"{state_dir} says this node joined, but {error.filename} cannot be read "
                               f"({error.strerror}); join again (after `tcl-master node revoke`)") from None
    except (ValueError, KeyError, TypeError) as error:
        raise JoinedStateError(f"{path} is damaged ({error!r:.80}); join again") from None
    if node_of_cert(creds.cert_pem) != state.node:
        raise JoinedStateError(f"{pki}/node.crt does not name node {state.node}; join again")
    return state, creds


def load_credentials(pki_dir: Path) -> NodeCredentials:
    return NodeCredentials((pki_dir / "ca.crt").read_bytes(), (pki_dir / "node.crt").read_bytes(),
                           (pki_dir / "node.key").read_bytes())


def agent_address(master: str, agent_port: int) -> str:
    """The master's host (as dialled) with the port the master named for agents; for a list
    of masters, each host with that port (HA masters are set up alike; a standby's hint
    names the leader's own agent address anyway)."""
    hosts = (address.strip().rpartition(":")[0] for address in master.split(","))
    return ",".join(dict.fromkeys(f"{host}:{agent_port}" for host in hosts))
