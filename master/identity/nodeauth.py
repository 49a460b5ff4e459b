"""Node identities: join tokens, and the certificates issued to nodes (so that
`tcl-master node revoke NAME` can stop them).

Join tokens (tcluster/security/jointoken.py): only the secret's sha256 is stored, compared
in constant time, and never logged. The records live in an AuthStore (master/identity/records.py):
DATA_DIR/auth.db for a single master, etcd for highly available ones. The running master
reads the store on every check, so a revocation counts from the next connect.

`NodeAuth(data_dir)` is the SQLite store, under the name the single-master code and its
tests have always used."""

from __future__ import annotations

from tcluster.master.identity.records import MAX_TOKEN_TTL_S, AuthStore, TokenRow, check_token
from tcluster.master.identity.sqlite import AUTH_DB, SqliteAuthStore
from tcluster.security.tokens import hash_secret

NodeAuth = SqliteAuthStore

__all__ = ["AUTH_DB", "MAX_TOKEN_TTL_S", "AuthStore", "NodeAuth", "TokenRow", "check_token", "hash_secret"]
