"""Which addresses a master may serve in plaintext, and where its agent port goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.domain.errors import FailedPrecondition
from tcluster.master.edge.listeners import agent_address, check_exposure, is_loopback
from tcluster.master.settings import MasterSettings
from tcluster.security.pki import init_pki


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.3.4.5", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("[::]", False), ("10.0.0.1", False), ("master.example.org", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_plaintext_off_loopback_needs_insecure_and_tls_needs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    check_exposure(MasterSettings(listen="127.0.0.1:7070", data_dir=tmp_path), None)
    with pytest.raises(FailedPrecondition, match="refusing to serve 0.0.0.0:7070 without TLS.*--insecure"):
        check_exposure(MasterSettings(listen="0.0.0.0:7070", data_dir=tmp_path), None)
    check_exposure(MasterSettings(listen="0.0.0.0:7070", data_dir=tmp_path, insecure=True), None)
    assert "INSECURE" in caplog.text and "register as any node" in caplog.text
    check_exposure(MasterSettings(listen="0.0.0.0:7070", data_dir=tmp_path), init_pki(tmp_path, []))


@pytest.mark.parametrize("listen, agent_listen, port, expected", [
    ("0.0.0.0:7070", "", 7070, "0.0.0.0:7071"),
    ("127.0.0.1:0", "", 43210, "127.0.0.1:0"),          # tests: both ports chosen by the kernel
    ("0.0.0.0:7070", "10.0.0.1:9000", 7070, "10.0.0.1:9000"),
])
def test_agent_address(listen: str, agent_listen: str, port: int, expected: str) -> None:
    assert agent_address(MasterSettings(listen=listen, agent_listen=agent_listen), port) == expected
