"""The etcd cluster's PKI, cached in the master's data dir.

A master (re)started while etcd has no quorum must still open its ports, so that clients
and agents hear "no master leads yet (the store is unreachable: ...)" instead of a
refused connection; for TLS it needs the PKI, which lives in etcd. So each time a master
reads the PKI from etcd it keeps a copy here (0600 files in a 0700 directory, like a
SQLite master's DATA_DIR/pki); it uses them only until etcd answers again.

"This cluster has no PKI" is never cached: a stale marker would let a master that starts
during an etcd outage serve plaintext, every caller an admin, after `init` secured the
cluster (review finding 7). An insecure cluster's master waits for etcd instead (but for
one that re-executes on stepping down: master/app/main.py hands it over in memory). And
whatever the ports were bound with is checked against etcd before campaigning
(`mismatch`): a master never leads with a PKI that etcd no longer holds."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tcluster.security.certs import write_private
from tcluster.security.pki import PKI_FILES, MasterPki, pki_files, pki_from_files

INSECURE = "insecure"       # written by older versions; removed, never trusted


def cache_dir(data_dir: Path, endpoints: tuple[str, ...], prefix: str) -> Path:
    """One directory per cluster (etcd endpoints and prefix), so two never mix."""
    key = hashlib.sha256(f"{','.join(endpoints)}|{prefix}".encode()).hexdigest()[:16]
    return data_dir / "etcd-pki" / key


def save(directory: Path, pki: MasterPki | None) -> None:
    """Keeps `pki`; None (etcd holds none) empties the cache, so that nothing is trusted."""
    if pki is None:
        for name in (*PKI_FILES, INSECURE):
            (directory / name).unlink(missing_ok=True)
        return
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    (directory / INSECURE).unlink(missing_ok=True)
    for name, data in pki_files(pki).items():
        write_private(directory / name, data)


def load(directory: Path) -> MasterPki | None:
    """The cached PKI; None when there is none (the master must then wait for etcd)."""
    (directory / INSECURE).unlink(missing_ok=True)      # an older version's marker
    if not (directory / "ca.crt").exists():
        return None
    return pki_from_files(f"{directory} (cached from etcd)",
                          {name: (directory / name).read_bytes() for name in PKI_FILES})


def mismatch(bound: MasterPki | None, held: MasterPki | None, where: str) -> str | None:
    """Why a master whose ports were bound with `bound` must not lead a cluster whose
    etcd holds `held` (None: they agree). Pure."""
    if bound is None and held is None:
        return None
    if bound is None:
        return (f"{where} holds a CA ({_ca(held)}) but this master's ports were bound without TLS "
                "(started while etcd was unreachable)")
    if held is None:
        return f"{where} holds no PKI but this master's ports were bound with TLS ({_ca(bound)}, {bound.origin})"
    if (bound.ca_pem, bound.cert_chain_pem) != (held.ca_pem, held.cert_chain_pem):
        return (f"{where} holds CA {_ca(held)} and master certificate that differ from those this master's "
                f"ports were bound with ({_ca(bound)}, {bound.origin})")
    return None


def _ca(pki: MasterPki | None) -> str:
    try:
        return pki.fingerprint if pki is not None else "none"
    except ValueError:
        return "an unreadable CA"
