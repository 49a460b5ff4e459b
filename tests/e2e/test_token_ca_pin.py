"""A new user with only a token, through the real binaries: `tcl-master init`, a TLS
master on 127.0.0.1, and `TCL_TOKEN=<token> tcl …` with no `tcl login` and no TCL_CA.
The token names the cluster CA's fingerprint, so tcl pins the CA from it (as `tcl login`
does) instead of failing with "is tcl-master running?"; a token pinning another CA is
refused before it is sent; a wrong TCL_CA is reported as a TLS failure."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tcluster.security.pki import init_pki
from tcluster.security.tokens import new_token
from testkit.procs import BIN, Proc

pytestmark = [pytest.mark.e2e]


def tcl(config: Path, address: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TCL_TOKEN", "TCL_CA", "TCL_MASTER")}
    return subprocess.run([str(BIN / "tcl"), "--master", address, "--wait-leader-s", "0", *args], capture_output=True, text=True,
                          env={**clean, "XDG_CONFIG_HOME": str(config), **env}, timeout=60)


def test_a_token_alone_pins_the_cluster_ca(tmp_path: Path) -> None:
    data = tmp_path / "master"
    out = subprocess.run([str(BIN / "tcl-master"), "init", "--data-dir", str(data)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    token = re.search(r"^\s+(tcu\.\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data), "--http", "off"],
                  tmp_path / "master.log")
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        config = tmp_path / "cfg"                            # a new user: nothing stored
        submitted = tcl(config, address, "submit", "--", "true", TCL_TOKEN=token)
        assert submitted.returncode == 0, submitted.stderr
        who = tcl(config, address, "whoami", TCL_TOKEN=token)
        assert who.returncode == 0 and who.stdout.startswith("admin on "), who.stderr
        assert not (config / "tcluster" / "credentials.json").exists()   # nothing stored without a login
        other = init_pki(tmp_path / "other", [])
        impostor = new_token(other.fingerprint)                      # pins a CA this master does not have
        refused = tcl(config, address, "whoami", TCL_TOKEN=impostor)
        assert refused.returncode == 1 and "the token was not sent" in refused.stderr, refused.stderr
        (tmp_path / "other.pem").write_bytes(other.ca_pem)
        wrong_ca = tcl(config, address, "whoami", TCL_TOKEN=token, TCL_CA=str(tmp_path / "other.pem"))
        assert wrong_ca.returncode == 1 and "TLS handshake with the master" in wrong_ca.stderr, wrong_ca.stderr
        assert "is tcl-master running" not in wrong_ca.stderr
    finally:
        master.stop()
