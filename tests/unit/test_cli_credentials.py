"""Where `tcl` finds its token and CA, and how refusals print."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from tcluster.cli.client import explain_rpc_error
from tcluster.cli.credentials import Credentials, credentials_for, default_master, is_loopback, save_credentials
from tcluster.domain.errors import InvalidArgument
from tcluster.security.tokens import new_token


@pytest.fixture(autouse=True)
def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for key in ("TCL_TOKEN", "TCL_CA", "TCL_MASTER"):
        monkeypatch.delenv(key, raising=False)


def test_the_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_credentials("m:7070", Credentials("tcu..stored", b"PEM"))
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert credentials_for("m:7070") == Credentials("tcu..stored", b"PEM")
    assert credentials_for("other:1") == Credentials()
    monkeypatch.setenv("TCL_TOKEN", "tcu..env")
    (tmp_path / "ca.pem").write_bytes(b"OTHER")
    monkeypatch.setenv("TCL_CA", str(tmp_path / "ca.pem"))
    assert credentials_for("m:7070") == Credentials("tcu..env", b"OTHER")
    assert Credentials("t").metadata == (("authorization", "Bearer t"),) and Credentials().metadata == ()


def test_a_token_never_travels_in_clear_text_off_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_TOKEN", "tcu..x")
    with pytest.raises(InvalidArgument, match="no cluster CA for 10.0.0.1:7070: the token would travel in clear text"):
        credentials_for("10.0.0.1:7070")
    assert credentials_for("127.0.0.1:7070").token == "tcu..x"       # loopback: the master may be insecure


def test_a_login_serves_every_address_of_its_list_and_back() -> None:
    save_credentials("a:7070,b:7070", Credentials("tcu..ha", b"HA"))
    save_credentials("solo:7070", Credentials("tcu..solo", b"SOLO"))
    assert default_master() == "solo:7070"
    for master in ("a:7070,b:7070", "b:7070", "c:7070,a:7070"):
        assert credentials_for(master) == Credentials("tcu..ha", b"HA")
    assert credentials_for("solo:7070,x:1") == Credentials("tcu..solo", b"SOLO")
    assert credentials_for("c:7070") == Credentials()
    save_credentials("a:7070,b:7070", Credentials("tcu..ha2", b"HA"))
    assert default_master() == "a:7070,b:7070" and credentials_for("a:7070").token == "tcu..ha2"


def test_a_list_is_loopback_only_if_every_address_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_TOKEN", "tcu..x")
    assert credentials_for("127.0.0.1:7070,127.0.0.1:7071").token == "tcu..x"
    with pytest.raises(InvalidArgument, match="no cluster CA"):
        credentials_for("127.0.0.1:7070,10.0.0.1:7070")


class _Error(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("code, printed", [
    (grpc.StatusCode.UNAUTHENTICATED, "error: the master at m:1 does not know you: no token: log in"),
    (grpc.StatusCode.PERMISSION_DENIED, "error: permission denied: no token: log in"),
])
def test_refusals_print_the_masters_reason_and_exit_1(code: grpc.StatusCode, printed: str) -> None:
    exit_code, message = explain_rpc_error(_Error(code, "no token: log in"), "m:1")  # type: ignore[abstract]
    assert exit_code == 1 and message.startswith(printed)
    assert os.environ.get("TCL_TOKEN") is None


def test_a_plaintext_call_to_a_tls_master_gets_a_login_hint() -> None:
    from tcluster.cli.login import login_hint
    closed = _Error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: UNAVAILABLE: "
                                                 "ipv4:127.0.0.1:7397: Socket closed")
    assert login_hint(closed, "127.0.0.1:7397") == ("hint: a master with TLS (after `tcl-master init`) needs a login "
                                                    "first: tcl login --master 127.0.0.1:7397")
    refused = _Error(grpc.StatusCode.UNAVAILABLE, "Failed to connect to remote host: Connection refused")
    assert login_hint(refused, "127.0.0.1:7397") == ""                 # nobody listens: the usual message says it
    save_credentials("127.0.0.1:7397", Credentials("tcu..t", b"PEM"))
    assert login_hint(closed, "127.0.0.1:7397") == ""                  # logged in: TLS was tried


@pytest.mark.parametrize("master, loopback", [
    ("127.0.0.1:7070", True),
    ("127.1.2.3:7070", True),
    ("[::1]:7070", True),
    ("::1", True),
    ("localhost:7070", True),
    ("LOCALHOST:7070", True),
    ("unix:/run/tcl.sock", True),
    ("127.attacker.example:7070", False),     # a name, not an address: it resolves anywhere
    ("127.0.0.1.nip.io:7070", False),
    ("localhost.attacker.example:7070", False),
    ("10.0.0.5:7070", False),
    ("[::ffff:10.0.0.5]:7070", False),
    ("127.0.0.1:7070,127.attacker.example:7070", False),
])
def test_loopback_is_a_parsed_address_not_a_prefix(master: str, loopback: bool) -> None:
    assert is_loopback(master) is loopback


def test_a_token_for_127_dot_a_name_is_refused_in_clear_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_TOKEN", "tcu..x")     # pins no CA: nothing to fetch it by
    for master in ("127.attacker.example:7070", "127.0.0.1.nip.io:7070"):
        with pytest.raises(InvalidArgument, match="the token would travel in clear text"):
            credentials_for(master)


def test_a_token_that_pins_a_ca_asks_for_it_instead_of_clear_text(monkeypatch: pytest.MonkeyPatch) -> None:
    token = new_token("sha256:" + "ab" * 32)
    monkeypatch.setenv("TCL_TOKEN", token)
    assert credentials_for("10.0.0.5:7070") == Credentials(token, b"", "sha256:" + "ab" * 32)
    assert credentials_for("10.0.0.5:7070").metadata == (("authorization", f"Bearer {token}"),)


@pytest.mark.parametrize("details", [
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7070: Ssl handshake failed: "
    "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7070: Handshake failed",
])
def test_a_tls_failure_says_tls_not_is_it_running(details: str) -> None:
    exit_code, message = explain_rpc_error(_Error(grpc.StatusCode.UNAVAILABLE, details), "m:1")  # type: ignore[abstract]
    assert exit_code == 1 and message.startswith("error: the TLS handshake with the master at m:1 failed")
    assert "is tcl-master running" not in message
