"""TLS from the master (and `tcl-master status/init/user ...`) and tcl-gm to etcd: the same
three files as etcdctl's --cacert, --cert and --key, given in the store URL so that every
command that takes `--store` (or tcl-gm's `--etcd`) reaches a secured etcd the same way:

    etcd://e1:2379,e2:2379?cacert=/etc/tcluster/etcd-ca.pem&cert=/etc/tcluster/etcd.pem&key=/etc/tcluster/etcd-key.pem

`cacert` alone: the members' certificates are checked against it (server TLS). With
`cert` and `key` too, the master shows its own certificate, as etcd requires under
`--client-cert-auth` (and, with etcd's auth enabled, the certificate's CN is the etcd
user). Without any of them the connection is plaintext."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote

import grpc

TLS_PARAMS = ("cacert", "cert", "key")
_MAX_PEM_BYTES = 1 << 20


@dataclass(frozen=True)
class EtcdTLS:
    cacert: Path | None = None     # None: the system's roots
    cert: Path | None = None       # with key: this client's certificate (chain) ...
    key: Path | None = None        # ... and its private key

    def query(self) -> str:
        """'?cacert=...&cert=...' as in the URL (paths only, never contents; quoted, so
        that parse_tls_query reads back the same paths)."""
        parts = [f"{name}={quote(str(getattr(self, name)), safe='/')}" for name in TLS_PARAMS
                 if getattr(self, name) is not None]
        return "?" + "&".join(parts) if parts else ""

    def credentials(self) -> grpc.ChannelCredentials:
        """Reads the files now, once per connection to etcd (a master keeps its own for its
        lifetime: a renewed client certificate takes a restart); ValueError naming the file
        that cannot be read."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.cacert, "cacert") if self.cacert else None,
            private_key=_read(self.key, "key") if self.key else None,
            certificate_chain=_read(self.cert, "cert") if self.cert else None,
        )


def parse_tls_query(query: str, check_files: bool = True) -> EtcdTLS | None:
    """'cacert=/a&cert=/b&key=/c' -> EtcdTLS; '' -> None (plaintext). ValueError saying
    which parameter is wrong and what is allowed; with check_files, also for a file that
    cannot be read or is not PEM (so a bad file is a usage error, not a later crash)."""
    if not query:
        return None
    values: dict[str, Path] = {}
    for name, value in parse_qsl(query, keep_blank_values=True, max_num_fields=10):
        if name not in TLS_PARAMS:
            raise ValueError(f"unknown store URL parameter {name[:40]!r}; allowed: {', '.join(TLS_PARAMS)}")
        if name in values:
            raise ValueError(f"store URL parameter {name!r} is given twice")
        if not value.startswith("/"):
            raise ValueError(f"{name}={value[:80]!r} must be an absolute path to a PEM file")
        values[name] = Path(value)
    if ("cert" in values) != ("key" in values):
        raise ValueError("cert and key go together: give both (the client certificate and its key) or neither")
    for name, path in values.items() if check_files else ():
        if not os.access(path, os.R_OK) or not path.is_file():
            raise ValueError(f"{name}={str(path)[:120]}: not a readable file")
        _read(path, name)
    return EtcdTLS(**values) if values else None


def _read(path: Path, name: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_PEM_BYTES + 1)
    except OSError as error:
        raise ValueError(f"{name}={str(path)[:120]}: {error.strerror or error}") from None
    if len(data) > _MAX_PEM_BYTES or b"-----BEGIN" not in data:
        raise ValueError(f"{name}={str(path)[:120]}: not a PEM file")
    return data
