"""tcl-gm's TLS settings: --lm-tls, --tls-cert/--tls-key, --client-ca errors name the field;
a missing certificate directory stops tcl-gm at start with the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.daemonkit.configfile import ConfigError
from tcluster.gm.main import main
from tcluster.gm.settings import settings_from

BASE = dict(name="gm0", index=0, lms="lm0=h:1,lm1=h:2")


def test_lm_tls_parses_per_lm_directories() -> None:
    assert settings_from({**BASE, "lm_tls": "lm0=/a, lm1=/b"}).lm_tls == {"lm0": "/a", "lm1": "/b"}
    assert settings_from({**BASE, "lm_tls": {"lm1": "/b"}}).lm_tls == {"lm1": "/b"}     # TOML table


@pytest.mark.parametrize("change, words", [
    (dict(lm_tls="lm9=/x"), "--lm-tls: 'lm9' is not an LM"),
    (dict(lm_tls="lm0"), "--lm-tls: 'lm0' is not NAME=VALUE"),
    (dict(tls_cert="/c"), "--tls-cert/--tls-key: give both"),
    (dict(tls_key="/k"), "--tls-cert/--tls-key: give both"),
    (dict(client_ca="/ca"), "--client-ca: needs --tls-cert"),
])
def test_tls_settings_errors_name_the_field(change: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        settings_from({**BASE, **change})


def test_tcl_gm_stops_at_start_on_a_missing_certificate_directory(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    code = main(["--lms", "lm0=127.0.0.1:1", "--lm-tls", f"lm0={missing}", "--state-dir", str(tmp_path / "s")])
    assert code == 2
    assert f"--lm-tls lm0: cannot read {missing}/ca.pem" in capsys.readouterr().err
