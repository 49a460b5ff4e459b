"""The agent's joined state: private files, what a start derives from it, and refusals
(a contradicting --node is a usage error; damaged state never falls back to plaintext)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tcluster.agent.joinstate import JoinedState, JoinedStateError, NodeCredentials, load_joined, save_joined
from tcluster.agent.main import build_parser, settings_from_args
from tcluster.domain.errors import InvalidArgument
from tcluster.security import nodekeys, pki


@pytest.fixture()
def joined(tmp_path: Path) -> Path:
    master = pki.init_pki(tmp_path / "master", [])
    key, csr = nodekeys.make_node_csr("n1")
    cert = pki.issue_node_cert(master, csr, "n1")
    state_dir = tmp_path / "agent"
    save_joined(state_dir, JoinedState("m.example:7070", "m.example:7071", "n1", master.fingerprint, {"rack": "r1"}),
                NodeCredentials(master.ca_pem, cert, key))
    return state_dir


def test_joined_state_is_private(joined: Path) -> None:
    for path in (joined, joined / "pki"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in (joined / "joined.json", *sorted((joined / "pki").iterdir())):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "PRIVATE" not in repr(load_joined(joined))


def _settings(joined: Path, *flags: str):  # type: ignore[no-untyped-def]
    return settings_from_args(build_parser().parse_args(["--state-dir", str(joined), "--cpus", "1",
                                                         "--memory", "1Gi", *flags]))


def test_a_joined_start_takes_name_address_labels_and_tls_from_the_join(joined: Path) -> None:
    s = _settings(joined, "--labels", "rack=mine,disk=ssd")
    assert (s.node, s.master, s.tls_dir) == ("n1", "m.example:7071", joined / "pki")
    assert s.labels == {"rack": "r1", "disk": "ssd"}
    assert _settings(joined, "--master", "10.0.0.9:7070").master == "10.0.0.9:7071"   # another route, agent port
    assert _settings(joined, "--node", "n1").node == "n1"


def test_a_contradicting_node_is_a_usage_error(joined: Path) -> None:
    with pytest.raises(InvalidArgument, match="--node: 'n2' contradicts this node's certificate"):
        _settings(joined, "--node", "n2")


def test_damaged_joined_state_stops_the_agent(joined: Path) -> None:
    (joined / "pki" / "node.key").unlink()
    with pytest.raises(JoinedStateError, match="node.key cannot be read"):
        _settings(joined)


def test_without_a_join_the_agent_starts_as_before(tmp_path: Path) -> None:
    s = _settings(tmp_path / "fresh", "--node", "n5")
    assert (s.node, s.master, s.tls_dir) == ("n5", "127.0.0.1:7070", None)
