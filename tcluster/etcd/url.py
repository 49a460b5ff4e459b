"""Store URLs as `--store` and `--etcd` take them, and etcd key prefixes.

`sqlite:PATH` is the master's embedded store (master/store/sqlite.py); `etcd://H:P,...[?cacert=...]`
names etcd members and, optionally, client TLS (tcluster/etcd/tls.py). The master and tcl-gm parse
them here, so that both daemons accept the same spelling and answer with the same errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tcluster.etcd.tls import EtcdTLS, parse_tls_query


def parse_endpoints(text: str) -> list[str]:
    """'h:p,h:p' -> ['h:p', 'h:p']; ValueError naming a bad one."""
    out = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not HOST:PORT")
        out.append(item)
    if not out:
        raise ValueError("no etcd endpoint given")
    return out


@dataclass(frozen=True)
class StoreUrl:
    kind: str                      # "sqlite" | "etcd"
    path: Path | None = None       # sqlite
    endpoints: tuple[str, ...] = ()  # etcd
    tls: EtcdTLS | None = None       # etcd: client TLS (tcluster/etcd/tls.py); None: plaintext

    def __str__(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:{self.path}"
        return "etcd://" + ",".join(self.endpoints) + (self.tls.query() if self.tls else "")


def parse_store_url(text: str, data_dir: Path, check_files: bool = True) -> StoreUrl:
    """'' -> sqlite in the data dir; ValueError with what is allowed otherwise (and, with
    check_files, for TLS files that cannot be read: tcluster/etcd/tls.py)."""
    if not text:
        return StoreUrl("sqlite", data_dir / "master.db")
    if text.startswith("sqlite:"):
        path = text[len("sqlite:"):]
        if not path:
            raise ValueError("sqlite: needs a path, e.g. sqlite:/var/lib/tcluster/master.db")
        return StoreUrl("sqlite", Path(path))
    if text.startswith("etcd://"):
        hosts, _, query = text[len("etcd://"):].partition("?")
        try:
            endpoints = tuple(parse_endpoints(hosts))
        except ValueError as error:
            raise ValueError(f"{error}; use etcd://HOST:PORT[,HOST:PORT...][?cacert=PATH&cert=PATH&key=PATH]") from None
        return StoreUrl("etcd", endpoints=endpoints, tls=parse_tls_query(query, check_files))
    raise ValueError(f"{text[:60]!r} is neither sqlite:PATH nor etcd://HOST:PORT[,HOST:PORT...]")


def check_prefix(prefix: str) -> str:
    """'/tcluster/' -> '/tcluster'; ValueError for anything else."""
    cleaned = prefix.strip().rstrip("/")
    if not cleaned.startswith("/") or len(cleaned) < 2 or len(cleaned) > 200 \
            or any(c.isspace() or c == "\0" for c in cleaned):
        raise ValueError(f"{prefix[:60]!r} is not a key prefix like /tcluster (a leading /, no spaces)")
    return cleaned
