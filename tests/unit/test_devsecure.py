"""`tcl dev`'s secure defaults: names and the uid range for the developer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.agent.runas import parse_uid_ranges
from tcluster.cli.credentials import credentials_for, default_master
from tcluster.cli.devsecure import deny_uids_except, ensure_login, ensure_pki, user_name_for
from tcluster.master.identity.users import UserDirectory


@pytest.mark.parametrize("uid, text", [(0, "0-999"), (1000, "0-999"), (500, "0-499,501-999"), (1, "0,2-999"),
                                       (999, "0-998"), (2, "0-1,3-999")])
def test_the_developers_own_uid_is_never_refused(uid: int, text: str) -> None:
    assert deny_uids_except(uid) == text
    ranges = parse_uid_ranges(text)
    assert uid == 0 or not any(a <= uid <= b for a, b in ranges)
    assert any(a <= 0 <= b for a, b in ranges)          # root: only through --allow-root


@pytest.mark.parametrize("unix, name", [("root", "root"), ("Alice.Smith", "alice.smith"), ("1234", "u_1234"),
                                        ("jo hn", "jo_hn")])
def test_unix_names_become_user_names(unix: str, name: str) -> None:
    assert user_name_for(unix) == name


def test_login_is_written_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    data = tmp_path / "data"
    assert ensure_pki(data) and not ensure_pki(data)
    name = ensure_login(data, "127.0.0.1:7399")
    first = credentials_for("127.0.0.1:7399")
    assert default_master() == "127.0.0.1:7399" and first.ca_pem.startswith(b"-----BEGIN CERTIFICATE")
    assert (tmp_path / "cfg" / "tcluster" / "credentials.json").stat().st_mode & 0o077 == 0
    directory = UserDirectory(data)
    assert directory.resolve(first.token).name == name and directory.resolve(first.token).admin
    ensure_login(data, "127.0.0.1:7399")                 # a second start keeps the working token
    assert credentials_for("127.0.0.1:7399") == first
    ensure_login(data, "127.0.0.1:7400")                 # another address: a new token, the old one retired
    assert credentials_for("127.0.0.1:7400").token != first.token
    with pytest.raises(Exception, match="not known"):
        directory.resolve(first.token)
    directory.close()
