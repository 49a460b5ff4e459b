"""Where `tcl` finds its master, token and cluster CA.

`tcl login` stores them in $XDG_CONFIG_HOME/tcluster/credentials.json (default
~/.config/tcluster; directory 0700, file 0600), one entry per master address (or per list
of the masters of an HA cluster, `a:7070,b:7070`), and makes the last login the default
master. An entry serves any address of its list, and a list any of its addresses' entries. TCL_MASTER, TCL_TOKEN and TCL_CA (a PEM file) override the
file. With a CA the channel is TLS, verifying the master's certificate against that CA
alone under the role name master.tcluster; the token goes in `authorization: Bearer`
metadata on every call. A token is never sent in clear text beyond this host."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tcluster.errors import InvalidArgument

MASTER_ENV = "TCL_MASTER"
TOKEN_ENV = "TCL_TOKEN"
CA_ENV = "TCL_CA"
DEFAULT_MASTER = "127.0.0.1:7070"
MASTER_NAME = "master.tcluster"       # the role name in every master's certificate
FILE_NAME = "credentials.json"
_LOOPBACK = ("127.", "localhost:", "[::1]:", "unix:")


@dataclass(frozen=True)
class Credentials:
    token: str = ""
    ca_pem: bytes = b""

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tcluster"


def credentials_path() -> Path:
    return config_dir() / FILE_NAME


def _read_file() -> dict[str, object]:
    try:
        data = json.loads(credentials_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def default_master() -> str:
    """TCL_MASTER, else the master of the last `tcl login`, else 127.0.0.1:7070."""
    stored = _read_file().get("default")
    return os.environ.get(MASTER_ENV) or (stored if isinstance(stored, str) and stored else DEFAULT_MASTER)


def _addresses(master: str) -> list[str]:
    return [master] if master.startswith("unix:") else [part.strip() for part in master.split(",") if part.strip()]


def is_loopback(master: str) -> bool:
    """Every address of `master` (one, or a comma-separated list) is on this host."""
    return all(address.startswith(_LOOPBACK) for address in _addresses(master))


def _stored_entry(master: str) -> dict[str, object]:
    """The entry stored for `master` exactly, else one whose list shares an address with it."""
    entries = _read_file().get("masters")
    if not isinstance(entries, dict):
        return {}
    entry = entries.get(master)
    if entry is None:
        wanted = set(_addresses(master))
        entry = next((e for key, e in entries.items() if wanted & set(_addresses(str(key)))), {})
    return entry if isinstance(entry, dict) else {}


def credentials_for(master: str) -> Credentials:
    """The environment first, then the stored entry for this master address (or list)."""
    entry = _stored_entry(master)
    token = os.environ.get(TOKEN_ENV, "").strip() or str(entry.get("token", ""))
    ca_pem = str(entry.get("ca_pem", "")).encode()
    ca_file = os.environ.get(CA_ENV, "")
    if ca_file:
        try:
            ca_pem = Path(ca_file).read_bytes()
        except OSError as error:
            raise InvalidArgument(CA_ENV, f"cannot read {ca_file[:200]!r}: {error.strerror or error}") from None
    if token and not ca_pem and not is_loopback(master):
        raise InvalidArgument("--master", f"no cluster CA for {master[:100]}: the token would travel in clear "
                                          f"text; run `tcl login --master {master[:100]}` or set {CA_ENV}")
    return Credentials(token, ca_pem)


def save_credentials(master: str, credentials: Credentials) -> Path:
    """Writes the entry for `master` and makes it the default (0600 in a 0700 directory)."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    data = _read_file()
    masters = data.get("masters") if isinstance(data.get("masters"), dict) else {}
    assert isinstance(masters, dict)
    masters[master] = {"token": credentials.token, "ca_pem": credentials.ca_pem.decode()}
    data.update(masters=masters, default=master)
    path = credentials_path()
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=2)
    os.replace(tmp, path)
    return path
