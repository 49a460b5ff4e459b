"""`tcl dev`'s secure defaults: one command, and still no open door on 127.0.0.1.

On first start the data dir gets a cluster CA (`tcl-master init`'s pki), the local agent
joins with a join token like any node, and the invoking Unix user becomes an admin whose
token and CA are written to their credentials file for the dev master's address, so
`tcl submit` just works from another shell of the same user, and from nobody else's.
Tasks run as that user: root only when the developer is root."""

from __future__ import annotations

import os
import pwd
import re
import time
from pathlib import Path

from tcluster.cli.credentials import Credentials, credentials_for, save_credentials
from tcluster.master.identity.nodeauth import NodeAuth
from tcluster.master.identity.accounts import add_user, remove_user
from tcluster.master.identity.users import UserDirectory
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.pki import init_pki, load_master_pki

_SAFE = re.compile(r"[^a-z0-9_.-]")
SYSTEM_UIDS = (0, 999)


def ensure_pki(data_dir: Path) -> bool:
    """True if this start created the cluster CA."""
    if load_master_pki(data_dir) is not None:
        return False
    init_pki(data_dir, [])
    return True


def join_token(data_dir: Path) -> str:
    pki = load_master_pki(data_dir)
    assert pki is not None
    auth = NodeAuth(data_dir)
    try:
        token_id, secret = auth.create_token(600, {}, time.time())
    finally:
        auth.close()
    return str(JoinTokenText(pki.fingerprint, token_id, secret))


def invoking_user() -> tuple[str, int]:
    """(Unix name, uid) of whoever runs `tcl dev`."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def user_name_for(unix_name: str) -> str:
    """A tcluster user name for a Unix name (they allow fewer characters)."""
    name = _SAFE.sub("_", unix_name.lower())[:32]
    return name if name and (name[0].isalpha() or name[0] == "_") else f"u_{name}"[:32]


def deny_uids_except(uid: int) -> str:
    """The agent's default refused range (system users) without the developer's own uid."""
    low, high = SYSTEM_UIDS
    if not low < uid <= high:
        return f"{low}-{high}"
    parts = [f"{low}-{uid - 1}" if uid - 1 > low else str(low)]
    if uid < high:
        parts.append(f"{uid + 1}-{high}")
    return ",".join(parts)


def _token_works(data_dir: Path, token: str) -> bool:
    directory = UserDirectory(data_dir)
    try:
        directory.resolve(token)
        return True
    except Exception:       # unknown, removed, malformed: issue a new one
        return False
    finally:
        directory.close()


def ensure_login(data_dir: Path, address: str) -> str:
    """The invoking user is an admin of the dev cluster with credentials for `address`;
    returns their tcluster user name. Reuses a stored token that still works."""
    pki = load_master_pki(data_dir)
    assert pki is not None
    unix_name, _ = invoking_user()
    name = user_name_for(unix_name)
    stored = credentials_for(address) if not os.environ.get("TCL_TOKEN") else Credentials()
    if stored.token and stored.ca_pem == pki.ca_pem and _token_works(data_dir, stored.token):
        return name
    remove_user(data_dir, name)          # its old token is lost (only a hash was kept): a new one
    token = add_user(data_dir, name, unix_name, ("*",), admin=True)
    save_credentials(address, Credentials(token, pki.ca_pem))
    return name
