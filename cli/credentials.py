"""Where `tcl` finds its master, token and cluster CA.

`tcl login` stores them in $XDG_CONFIG_HOME/tcluster/credentials.json (default
~/.config/tcluster; directory 0700, file 0600), one entry per master address (or per list
of the masters of an HA cluster, `a:7070,b:7070`), and makes the last login the default
master. An entry serves any address of its list, and a list any of its addresses' entries. TCL_MASTER, TCL_TOKEN and TCL_CA (a PEM file) override the
file. With a CA the channel is TLS, verifying the master's certificate against that CA
alone under the role name master.tcluster; the token goes in `authorization: Bearer`
metadata on every call. A token with no CA given pins the cluster CA by its fingerprint,
as `tcl login` does: the CA is fetched from the master and kept only if it matches,
before the token leaves this host. A token is never sent in clear text beyond this host
(loopback: an IP address that is loopback, `localhost`, or a unix socket; never a name
that merely starts with "127.")."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tcluster.domain.errors import InvalidArgument, Unauthenticated, Unavailable

MASTER_ENV = "TCL_MASTER"
TOKEN_ENV = "TCL_TOKEN"
CA_ENV = "TCL_CA"
DEFAULT_MASTER = "127.0.0.1:7070"
MASTER_NAME = "master.tcluster"       # the role name in every master's certificate
FILE_NAME = "credentials.json"
FETCH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Credentials:
    token: str = ""
    ca_pem: bytes = b""
    ca_pin: str = ""      # no CA given: the fingerprint the token pins, to fetch the CA by (pinned_ca)

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


def host_is_loopback(address: str) -> bool:
    """HOST:PORT, [V6]:PORT, a bare host or a unix: target names this host: a loopback
    IP address, the name `localhost`, or a unix socket. Any other name may resolve
    anywhere (127.attacker.example, 127.0.0.1.nip.io), so it is not loopback."""
    if address.startswith("unix:"):
        return True
    host = address
    if address.startswith("["):
        host = address[1:].partition("]")[0]
    elif address.count(":") == 1:
        host = address.rpartition(":")[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(master: str) -> bool:
    """Every address of `master` (one, or a comma-separated list) is on this host."""
    return all(host_is_loopback(address) for address in _addresses(master))


def token_pin(token: str) -> str:
    """The cluster CA fingerprint a user token names ("" for none or a malformed token)."""
    from tcluster.security.tokens import parse_token     # only with a token: `tcl --help` stays light
    try:
        return parse_token(token).ca_fingerprint
    except Unauthenticated:
        return ""


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
    if token and not ca_pem and (pin := token_pin(token)):
        return Credentials(token, b"", pin)        # the CA is fetched by its pin before the token is sent
    if token and not ca_pem and not is_loopback(master):
        raise InvalidArgument("--master", f"no cluster CA for {master[:100]}: the token would travel in clear "
                                          f"text; run `tcl login --master {master[:100]}` or set {CA_ENV}")
    return Credentials(token, ca_pem)


def cluster_ca(master: str, pin: str, ca_file: Path | None = None) -> bytes:
    """The CA to trust for this master: the PEM file (checked against the pin, if any),
    else the one the master presents, kept only if its sha256 is the pin. Raises
    InvalidArgument, PinMismatch or OSError (no master reached)."""
    from tcluster.security.bootstrap import fetch_pinned_ca
    from tcluster.security.certs import ca_fingerprint
    from tcluster.daemonkit.leaders import parse_addresses               # pulls in grpc: only here
    if ca_file is not None:
        try:
            ca_pem = ca_file.read_bytes()
            fingerprint = ca_fingerprint(ca_pem)
        except (OSError, ValueError) as error:
            raise InvalidArgument("--ca", f"{str(ca_file)[:200]} is not a readable PEM certificate ({error})") from None
        if pin and pin != fingerprint:
            raise InvalidArgument("--ca", f"{str(ca_file)[:200]} is {fingerprint}, but the token pins {pin}")
        return ca_pem
    if not pin:
        raise InvalidArgument("--ca", "the token pins no cluster CA; give the CA file with --ca FILE")
    addresses = parse_addresses(master, "--master")
    for address in addresses[:-1]:   # every master of a cluster presents its CA; the first reached will do
        try:
            return fetch_pinned_ca(address, pin, FETCH_TIMEOUT_S)
        except OSError:
            continue                 # a PinMismatch is not skipped: that master is not who the token says
    return fetch_pinned_ca(addresses[-1], pin, FETCH_TIMEOUT_S)


class CaUnavailable(Unavailable):
    """The CA the token pins could not be had from the master: nothing was sent."""


def pinned_ca(master: str, credentials: Credentials) -> Credentials:
    """`credentials` with the CA its token pins fetched from `master` (unchanged when
    it has a CA or no pin). Raises CaUnavailable saying why, before the token is sent."""
    if credentials.ca_pem or not credentials.ca_pin:
        return credentials
    from tcluster.security.bootstrap import NotTls, PinMismatch
    from tcluster.security.nodekeys import OpensslMissing
    try:
        return replace(credentials, ca_pem=cluster_ca(master, credentials.ca_pin))
    except NotTls as error:
        if is_loopback(master):      # a plaintext master on this host: the token stays on this host
            return replace(credentials, ca_pin="")
        raise CaUnavailable(f"{error}; the token was not sent") from None
    except (PinMismatch, OpensslMissing) as error:
        raise CaUnavailable(f"{error}; the token was not sent") from None
    except OSError as error:
        raise CaUnavailable(f"cannot reach the master at {master} to fetch the cluster CA the token pins "
                            f"({error.strerror or error}); is tcl-master running? set --master or "
                            f"{MASTER_ENV}") from None


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
