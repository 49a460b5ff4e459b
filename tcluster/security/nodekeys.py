"""A node's key and CSR, and a signature check, with the `openssl` command: what a node
does with keys, without the 12 MB `cryptography` stack on every node (certs.py says why).

The key is made in a private temporary directory and never leaves the node; the CSR's only
name is `node:<name>` (a checked node name: no characters openssl's config would read)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tcluster.security.certs import NODE_CN_PREFIX, check_node_name

OPENSSL_TIMEOUT_S = 60.0
SEARCH_PATH = "/usr/bin:/bin"
# The whole config openssl reads: nothing from the host's openssl.cnf.
_REQ_CONFIG = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {cn}\n"


class OpensslMissing(RuntimeError):
    """No `openssl` command on this host, or one that did not answer."""


def _openssl() -> str:
    found = shutil.which("openssl", path=SEARCH_PATH)     # the PATH it then runs with
    if found is None:
        raise OpensslMissing("the `openssl` command is needed to make this node's key (Debian: apt install openssl)")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([_openssl(), *args], capture_output=True, text=True, timeout=OPENSSL_TIMEOUT_S,
                              env={"PATH": SEARCH_PATH, "OPENSSL_CONF": "/dev/null"})
    except subprocess.TimeoutExpired:
        raise OpensslMissing(f"`openssl {args[0]}` did not finish within {OPENSSL_TIMEOUT_S:g} s") from None


def make_node_csr(node: str) -> tuple[bytes, bytes]:
    """A fresh P-256 key and a CSR for `node:<node>`: (key_pem PKCS#8, csr_pem)."""
    check_node_name(node)
    with tempfile.TemporaryDirectory(prefix="tcl-csr-") as tmp:      # 0700
        config, key, csr = Path(tmp, "req.cnf"), Path(tmp, "node.key"), Path(tmp, "node.csr")
        config.write_text(_REQ_CONFIG.format(cn=NODE_CN_PREFIX + node))
        done = _run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-sha256",
                    "-config", str(config), "-keyout", str(key), "-out", str(csr))
        if done.returncode != 0 or not key.exists() or not csr.exists():
            raise RuntimeError(f"openssl could not make the node's key: {done.stderr.strip()[-500:]}")
        return key.read_bytes(), csr.read_bytes()


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """True if the CA signed this certificate (signature only: dates and names are TLS's job)."""
    with tempfile.TemporaryDirectory(prefix="tcl-verify-") as tmp:
        ca, cert = Path(tmp, "ca.pem"), Path(tmp, "cert.pem")
        ca.write_bytes(ca_pem)
        cert.write_bytes(cert_pem)
        done = _run("verify", "-no_check_time", "-CAfile", str(ca), str(cert))
        return done.returncode == 0 and done.stdout.strip() == f"{cert}: OK"
