"""tcl-gm's settings: one pydantic model, from flags or a TOML file (same keys, read by
tcluster/daemonkit/configfile.py, so that an error names the file, the line and the key).

Address lists: `--lms lm0=H:P,lm1=H:P` and `--gms gm0=H:P,gm1=H:P` (commas between
members). An HA LM (several masters) lists its masters joined by `|`:
`lm0=m1:7070|m2:7070`; the GM tries them in turn until the leader answers."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from tcluster.daemonkit.configfile import ConfigError, load_args
from tcluster.daemonkit.logsetup import add_log_flags
from tcluster.version import add_version_flag

# Keys whose TOML value may also be a table or an array (`[queue_map]`, `[shares]`), given to
# the model as it is; as strings they read as the flags do.
STRUCTURED = frozenset({"lms", "gms", "queue_map", "lm_tls", "shares"})
Origin = Callable[[str], str | None]


def pairs(text: str) -> list[tuple[str, str]]:
    """'a=x, b=y' -> [('a', 'x'), ('b', 'y')]; ValueError naming the item that is not NAME=VALUE."""
    out: list[tuple[str, str]] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{item!r} is not NAME=VALUE (e.g. lm0=127.0.0.1:7070)")
        out.append((name.strip(), value.strip()))
    return out


class GMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "gm0"
    index: int = Field(0, ge=0, le=63)
    listen: str = "127.0.0.1:7080"
    lms: list[tuple[str, list[str]]] = Field(default_factory=list)     # (name, addresses) in LM index order
    gms: list[tuple[str, str]] = Field(default_factory=list)           # (name, address) in GM index order
    queue_map: dict[str, str] = Field(default_factory=dict)            # queue -> GM name
    state_dir: str = "/var/lib/tcluster/gm"
    view_max_age_s: float = Field(30.0, gt=0)      # 3 state intervals of the LMs' default 10 s
    token: str = ""                                # an admin token for secure masters
    lm_tls: dict[str, str] = Field(default_factory=dict)   # LM name -> DIR with ca.pem, cert.pem, key.pem (gm/tls.py)
    tls_cert: str = ""                             # this GM's own server certificate ...
    tls_key: str = ""                              # ... and key
    client_ca: str = ""                            # clients (users, other GMs) must show a certificate of this CA
    insecure: bool = False                         # plaintext --listen on a non-loopback address (issue 35)
    # Membership, queue map and takeover in etcd (gm/fedetcd.py); empty: static --gms/--queue-map.
    etcd: str = ""                                 # HOST:PORT[,HOST:PORT] or etcd://...[?cacert=...]
    etcd_prefix: str = "/tcluster-gm"
    member_ttl_s: int = Field(10, ge=2, le=300)    # a dead GM's queues are taken over this long after
    # Alg. 2: under contention a queue under its share preempts the most over-share queue.
    preemption: bool = False
    shares: dict[str, float] = Field(default_factory=dict)     # queue -> fraction; {} = equal over queue_map
    log_level: str = "INFO"                        # checked by the flag (tcluster/daemonkit/logsetup.py)
    log_format: str = "text"
    http: str = ""                                 # /metrics, /api/v1/status and a status page (gm/web.py); "": off

    @field_validator("shares")
    @classmethod
    def _shares(cls, v: dict[str, float]) -> dict[str, float]:
        for q, f in v.items():
            if not 0 < f <= 1:
                raise ValueError(f"queue {q!r}: share {f} is not in (0, 1]")
        if sum(v.values()) > 1 + 1e-9:
            raise ValueError(f"shares add up to {sum(v.values()):g}; at most 1 (fractions of the federation)")
        return v

    @field_validator("listen", "http")
    @classmethod
    def _listen(cls, v: str, info: ValidationInfo) -> str:
        if not v and info.field_name == "http":       # --http off
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{v!r} is not HOST:PORT")
        return v

    @field_validator("etcd")
    @classmethod
    def _etcd(cls, v: str) -> str:
        if v:
            from tcluster.gm.fedetcd import etcd_url
            etcd_url(v)
        return v

    @field_validator("etcd_prefix")
    @classmethod
    def _etcd_prefix(cls, v: str) -> str:
        from tcluster.etcd.url import check_prefix
        return check_prefix(v)

    def gm_names(self) -> list[str]:
        return [n for n, _ in self.gms] or [self.name]

    def owner_of(self, queue: str) -> str | None:
        return self.queue_map.get(queue)

    def queue_shares(self) -> dict[str, float]:
        """--shares, else an equal share for every queue of --queue-map."""
        if self.shares or not self.queue_map:
            return dict(self.shares)
        return {q: 1 / len(self.queue_map) for q in self.queue_map}


def parse_lms(text: str) -> list[tuple[str, list[str]]]:
    return [(n, [a for a in v.split("|") if a]) for n, v in pairs(text)]


def parse_queue_map(text: str) -> dict[str, str]:
    return dict(pairs(text))


def parse_shares(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for q, f in pairs(text):
        try:
            out[q] = float(f)
        except ValueError:
            raise ValueError(f"queue {q!r}: {f!r} is not a number (a fraction, e.g. a=0.5)") from None
    return out


# How each list-valued setting reads when it is given as text (a flag, or a string in the file).
_TEXT_FORMS: dict[str, Callable[[str], Any]] = {
    "lms": parse_lms, "gms": pairs, "queue_map": parse_queue_map,
    "lm_tls": lambda text: dict(pairs(text)), "shares": parse_shares,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tcl-gm", description="A federation Global Manager (Megha).")
    p.add_argument("--config", help="TOML file with the same keys (name, index, listen, lms, gms, queue_map, ...)")
    p.add_argument("--name", help="this GM's name (default gm0)")
    p.add_argument("--index", type=int, help="this GM's index: its partition in every LM (default 0)")
    p.add_argument("--listen", help="HOST:PORT for GlobalManagerService (default 127.0.0.1:7080)")
    p.add_argument("--lms", help="LMs in index order: lm0=HOST:PORT,lm1=HOST:PORT (HA masters joined by |)")
    p.add_argument("--gms", help="all GMs in index order: gm0=HOST:PORT,gm1=HOST:PORT")
    p.add_argument("--queue-map", help="queue -> owning GM: a=gm0,b=gm1")
    p.add_argument("--state-dir", help="where the GM's SQLite state lives")
    p.add_argument("--view-max-age-s", type=float, help="an LM view older than this is not placed on (default 30)")
    p.add_argument("--token", help="admin token presented to secure LMs")
    p.add_argument("--lm-tls", help="per-LM GM certificate dirs (ca.pem, cert.pem, key.pem): lm0=DIR,lm1=DIR")
    p.add_argument("--tls-cert", help="serve GlobalManagerService over TLS with this certificate (PEM)")
    p.add_argument("--tls-key", help="the key of --tls-cert (PEM)")
    p.add_argument("--client-ca", help="require client certificates of this CA (mutual TLS; GMs and users)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow a plaintext --listen on a non-loopback address (tokens and jobs in the clear)")
    p.add_argument("--etcd", help="etcd endpoints HOST:PORT[,HOST:PORT] (or etcd://...?cacert=..): membership, "
                                  "queue map and takeover live there (--queue-map only seeds it)")
    p.add_argument("--etcd-prefix", help="key prefix in etcd (default /tcluster-gm)")
    p.add_argument("--member-ttl-s", type=int, help="this GM's lease TTL: its queues are taken over this long "
                                                    "after it dies (default 10)")
    p.add_argument("--preemption", action="store_true", default=None,
                   help="Alg. 2: under contention, preempt the queue most over its share (default off)")
    p.add_argument("--shares", help="queue shares for --preemption: a=0.5,b=0.5 (default: equal over --queue-map)")
    add_log_flags(p, level_default=None, format_default=None)
    p.add_argument("--http", metavar="HOST:PORT", help="serve /metrics (Prometheus), /api/v1/status and a status "
                                                      "page here (default: off)")
    add_version_flag(p)
    return p


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _error(origin: Origin, dest: str, message: str) -> ConfigError:
    """'--queue-map: ...', or 'FILE:LINE: queue_map: ...' when the value came from --config."""
    return ConfigError(f"{origin(dest) or _flag(dest)}: {message}")


def settings_from(values: dict[str, Any], origin: Origin = lambda dest: None) -> GMSettings:
    """The checked settings; ConfigError names the flag (or, through `origin`, the config
    file's line and key) of the first bad value."""
    v = dict(values)
    for dest, form in _TEXT_FORMS.items():
        if isinstance(v.get(dest), str):
            try:
                v[dest] = form(v[dest])
            except ValueError as e:
                raise _error(origin, dest, str(e)) from None
    try:
        s = GMSettings(**v)
    except ValidationError as e:
        err = e.errors()[0]
        raise _error(origin, str(err["loc"][0]), err["msg"].removeprefix("Value error, ")) from e
    _check_members(s, origin)
    _check_tls(s, origin)
    return s


def _check_members(s: GMSettings, origin: Origin) -> None:
    names = s.gm_names()
    if s.gms and s.name not in names:
        raise _error(origin, "name", f"{s.name!r} is not one of --gms ({', '.join(names)})")
    if s.gms and names.index(s.name) != s.index:
        raise _error(origin, "index", f"{s.index} but {s.name!r} is GM {names.index(s.name)} in --gms")
    for q, g in s.queue_map.items():
        if g not in names and not s.etcd:       # with etcd, GMs are known by their member keys
            raise _error(origin, "queue_map", f"queue {q!r} maps to {g!r}, not a GM (known: {', '.join(names)})")
    if not s.lms:
        raise _error(origin, "lms", "no LM given; use lm0=HOST:PORT[,lm1=HOST:PORT]")


def _check_tls(s: GMSettings, origin: Origin) -> None:
    if bool(s.tls_cert) != bool(s.tls_key):
        raise ConfigError("--tls-cert/--tls-key: give both (the server certificate and its key) or neither")
    if s.client_ca and not s.tls_cert:
        raise _error(origin, "client_ca", "needs --tls-cert and --tls-key (mutual TLS is TLS first)")
    host = s.listen.rpartition(":")[0].strip("[]")
    if not s.tls_cert and not s.insecure and host not in ("localhost",) and not _loopback(host):
        raise _error(origin, "listen", f"{s.listen} is not a loopback address and the GM has no --tls-cert: "
                     "serve TLS (--tls-cert/--tls-key), listen on 127.0.0.1, or say --insecure")
    unknown = sorted(set(s.lm_tls) - {n for n, _ in s.lms})
    if unknown:
        known = ", ".join(n for n, _ in s.lms)
        raise _error(origin, "lm_tls", f"{unknown[0]!r} is not an LM of --lms (known: {known})")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(argv: list[str] | None = None) -> GMSettings:
    """Flags over the --config file (tcluster/daemonkit/configfile.py) over the defaults; ConfigError
    for a file or a value that cannot be used (argparse exits 2 on a bad flag)."""
    loaded = load_args(build_parser(), sys.argv[1:] if argv is None else argv, structured=STRUCTURED, dashes=True)
    values = {k: v for k, v in vars(loaded.args).items() if v is not None and k != "config"}
    return settings_from(values, loaded.origin)
