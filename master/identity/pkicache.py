"""The etcd cluster's PKI, cached in the master's data dir.

A master (re)started while etcd has no quorum must still open its ports, so that clients
and agents hear "no master leads yet (the store is unreachable: ...)" instead of a
refused connection; for TLS it needs the PKI, which lives in etcd. So each time a master
reads the PKI from etcd it keeps a copy here (0600 files in a 0700 directory, like a
SQLite master's DATA_DIR/pki), or a marker when the cluster has none (an insecure
cluster); it uses them only until etcd answers again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tcluster.security.pki import PKI_FILES, MasterPki, pki_files, pki_from_files, write_private

INSECURE = "insecure"


def cache_dir(data_dir: Path, endpoints: tuple[str, ...], prefix: str) -> Path:
    """One directory per cluster (etcd endpoints and prefix), so two never mix."""
    key = hashlib.sha256(f"{','.join(endpoints)}|{prefix}".encode()).hexdigest()[:16]
    return data_dir / "etcd-pki" / key


def save(directory: Path, pki: MasterPki | None) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    files = pki_files(pki) if pki is not None else {}
    for name in (*PKI_FILES, INSECURE):
        path = directory / name
        if name in files:
            write_private(path, files[name])
        elif name == INSECURE and pki is None:
            write_private(path, b"")
        else:
            path.unlink(missing_ok=True)


def load(directory: Path) -> tuple[bool, MasterPki | None]:
    """(found, pki): found False when nothing was cached yet."""
    if (directory / INSECURE).exists():
        return True, None
    if not (directory / "ca.crt").exists():
        return False, None
    return True, pki_from_files(f"{directory} (cached from etcd)",
                                {name: (directory / name).read_bytes() for name in PKI_FILES})
