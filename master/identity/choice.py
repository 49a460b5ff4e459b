"""Where the master's identity lives, chosen by `--store` / `--store-prefix`.

- `""` (the default) or `sqlite:PATH`: DATA_DIR/auth.db and DATA_DIR/pki/, today's single
  master. PATH names the state database only; the identity stays in --data-dir.
- `etcd://HOST:PORT[,HOST:PORT...]`: keys under P/auth/ and P/pki/ (P = --store-prefix,
  default /tcluster), shared by every master of the cluster.

The master and the offline commands call the same three functions: `open_auth_store`,
`load_pki` and `init_identity`, so the choice is made in one place."""

from __future__ import annotations

import argparse
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from tcluster.domain.errors import InvalidArgument
from tcluster.etcd import url as storeurl
from tcluster.master.identity.accounts import bootstrap_admin
from tcluster.master.identity.records import AuthStore, User
from tcluster.etcd.tls import EtcdTLS
from tcluster.master.identity.sqlite import SqliteAuthStore
from tcluster.security.pki import MasterPki, init_pki, load_master_pki, master_sans, new_master_pki
from tcluster.security.tokens import new_token

if TYPE_CHECKING:
    from tcluster.etcd.kv import EtcdKV
    from tcluster.etcd.mirror import Mirror

T = TypeVar("T")
DEFAULT_PREFIX = "/tcluster"
ETCD_SCHEME = "etcd://"
SQLITE_SCHEME = "sqlite:"
FIRST_ADMIN = "admin"


@dataclass(frozen=True)
class StoreChoice:
    endpoints: tuple[str, ...]      # empty: SQLite in data_dir
    prefix: str
    data_dir: Path
    tls: EtcdTLS | None = None      # etcd: client TLS (tcluster/etcd/tls.py)

    @property
    def etcd(self) -> bool:
        return bool(self.endpoints)

    def describe(self) -> str:
        if self.etcd:
            return f"etcd://{','.join(self.endpoints)}{self.tls.query() if self.tls else ''} under {self.prefix}"
        return str(self.data_dir)

    def flags(self) -> str:
        """The flags that name this store again, for the hints commands print."""
        if self.etcd:
            prefix = "" if self.prefix == DEFAULT_PREFIX else f" --store-prefix {self.prefix}"
            url = f"etcd://{','.join(self.endpoints)}" + (self.tls.query() if self.tls else "")
            return f"--store {shlex.quote(url)}{prefix}"     # quoted: a TLS URL has ? and &
        return f"--data-dir {self.data_dir}"


@dataclass(frozen=True)
class Initialised:
    pki: MasterPki
    admin_token: str
    where: StoreChoice


def check_prefix(prefix: str) -> str:
    """'/tcluster/' -> '/tcluster'; InvalidArgument('--store-prefix') for anything else."""
    try:
        return storeurl.check_prefix(prefix)
    except ValueError as error:
        raise InvalidArgument("--store-prefix", str(error)) from None


def parse_store(store_url: str, prefix: str, data_dir: Path) -> StoreChoice:
    """InvalidArgument naming --store or --store-prefix for a bad value (one parser:
    tcluster/etcd/url.py, which the daemon's settings use too)."""
    try:
        url = storeurl.parse_store_url(store_url.strip(), data_dir)
    except ValueError as error:
        raise InvalidArgument("--store", str(error)) from None
    return StoreChoice(url.endpoints, check_prefix(prefix), data_dir, url.tls)


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=Path(".tcluster"), type=Path, help="the master's state directory")
    parser.add_argument("--store", default="", metavar="URL",
                        help="etcd://HOST:PORT[,...] for highly available masters (default: SQLite in --data-dir)")
    parser.add_argument("--store-prefix", default=DEFAULT_PREFIX, metavar="P",
                        help="with etcd: the cluster's key prefix (default %(default)s)")


def choice_of(args: argparse.Namespace) -> StoreChoice:
    return parse_store(args.store, args.store_prefix, args.data_dir)


def open_auth_store(store_url: str, prefix: str, data_dir: Path, mirror: Mirror | None = None) -> AuthStore:
    """The identity records. With etcd and a Mirror (the running master's), reads are
    served from the mirror; without one (offline commands), from etcd."""
    return open_chosen(parse_store(store_url, prefix, data_dir), mirror)


def open_chosen(choice: StoreChoice, mirror: Mirror | None = None) -> AuthStore:
    if not choice.etcd:
        return SqliteAuthStore(choice.data_dir)
    from tcluster.master.identity.etcd import EtcdAuthStore
    from tcluster.master.store.etcdbridge import EtcdBridge
    return EtcdAuthStore(EtcdBridge(list(choice.endpoints), tls=choice.tls), choice.prefix, mirror, owns_bridge=True)


def load_pki(store_url: str, prefix: str, data_dir: Path) -> MasterPki | None:
    """The cluster's PKI, or None before `init` (the master then serves without TLS)."""
    return load_chosen_pki(parse_store(store_url, prefix, data_dir))


def load_chosen_pki(choice: StoreChoice) -> MasterPki | None:
    if not choice.etcd:
        return load_master_pki(choice.data_dir)
    from tcluster.master.identity.etcdpki import read_pki
    return _on_etcd(choice, lambda kv: read_pki(kv, choice.prefix))


def init_identity(choice: StoreChoice, advertise: list[str]) -> Initialised:
    """A new cluster: the CA, the master certificate and the first admin (its token
    returned, to be shown once). FailedPrecondition if the store already has a CA."""
    master_sans(advertise)   # a bad name stops here, before anything is written
    if not choice.etcd:
        pki = init_pki(choice.data_dir, advertise)
        SqliteAuthStore(choice.data_dir).close()   # auth.db with its tables (0600)
        return Initialised(pki, bootstrap_admin(choice.data_dir, FIRST_ADMIN), choice)
    from tcluster.master.identity.etcdpki import FirstAdmin, pki_prefix, write_new_cluster
    pki = new_master_pki(advertise, f"etcd {pki_prefix(choice.prefix)}")
    admin = FirstAdmin(User(FIRST_ADMIN, "", ("*",), True, time.time()), new_token(pki.fingerprint))
    _on_etcd(choice, lambda kv: write_new_cluster(kv, choice.prefix, pki, admin))
    return Initialised(pki, admin.token, choice)


def _on_etcd(choice: StoreChoice, fn: Callable[[EtcdKV], Awaitable[T]]) -> T:
    """One call on a short-lived connection: for commands and for the master's start, which
    may be on a running loop (so not asyncio.run there)."""
    from tcluster.master.store.etcdbridge import EtcdBridge
    bridge = EtcdBridge(list(choice.endpoints), tls=choice.tls)
    try:
        return bridge.call(fn)
    finally:
        bridge.close()

