"""The one interface to the master's durable state, and the choice of its backend.

`sqlite:PATH` (master/store/sqlite.py) is the embedded default, one master; `etcd://H:P,...`
(master/store/etcd.py) keeps the state in etcd so that several masters can take turns
leading (docs/ha.md). The scheduling core and the service see only `StateStore`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tcluster.errors import InvalidArgument
from tcluster.master.store.etcdkv import parse_endpoints
from tcluster.master.store.etcdtls import EtcdTLS, parse_tls_query
from tcluster.master.core.events import KillIntent, Step
from tcluster.model import Job, Node, Task


class StoreRefused(InvalidArgument):
    """The store refused one step's rows as they are (too large for it): that step was not
    made, and sending it again will not help. Other steps of the same batch are unaffected."""

    def __init__(self, message: str) -> None:
        super().__init__("", f"the store refused this change: {message}")


class StateStore(Protocol):
    async def commit(self, steps: list[tuple[Step, list[str]]]) -> list[Exception | None]:
        """Writes the steps' rows, in order, and answers for each: None (durable), or the
        error that says whether it was not made (StoreRefused, StoreError) or may have been
        (StoreError, NotLeader: etcd did not report the outcome). Raises when nothing was
        written (StoreError, NotLeader)."""

    def close(self) -> None: ...
    def job_exists(self, job_id: str) -> bool: ...
    def load_jobs(self, finished_limit: int | None = None, finished_tasks: int | None = None) -> list[Job]: ...
    def load_tasks(self, job_ids: set[str] | None = None) -> list[Task]: ...
    def load_job(self, job_id: str) -> tuple[Job, list[Task]] | None: ...
    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]: ...
    def load_nodes(self) -> list[Node]: ...
    def load_kills(self) -> list[KillIntent]: ...


@dataclass(frozen=True)
class StoreUrl:
    kind: str                      # "sqlite" | "etcd"
    path: Path | None = None       # sqlite
    endpoints: tuple[str, ...] = ()  # etcd
    tls: EtcdTLS | None = None       # etcd: client TLS (master/store/etcdtls.py); None: plaintext

    def __str__(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:{self.path}"
        return "etcd://" + ",".join(self.endpoints) + (self.tls.query() if self.tls else "")


def parse_store_url(text: str, data_dir: Path, check_files: bool = True) -> StoreUrl:
    """'' -> sqlite in the data dir; ValueError with what is allowed otherwise (and, with
    check_files, for TLS files that cannot be read: master/store/etcdtls.py)."""
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
