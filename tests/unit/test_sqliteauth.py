"""auth.db has one opener: the user side and the node side get the same durable settings."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from tcluster.master.sqliteauth import AUTH_DB, SqliteAuthStore
from tcluster.master.users import UserDirectory, add_user


def test_every_way_in_opens_auth_db_private_wal_and_synchronous_full(tmp_path: Path) -> None:
    add_user(tmp_path, "alice", "alice", (), False)          # the offline user command's path
    assert stat.S_IMODE((tmp_path / AUTH_DB).stat().st_mode) == 0o600
    assert sqlite3.connect(tmp_path / AUTH_DB).execute("PRAGMA journal_mode").fetchone() == ("wal",)
    directory = UserDirectory(tmp_path)                        # the master's user gate
    store = directory.store
    assert isinstance(store, SqliteAuthStore)
    assert store.db.execute("PRAGMA synchronous").fetchone() == (2,)     # FULL
    assert {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} >= {
        "users", "join_tokens", "node_certs"}
    directory.close()
    directory.close()                                          # idempotent: a shared store is closed twice


def test_a_directory_over_a_given_store_leaves_it_open(tmp_path: Path) -> None:
    store = SqliteAuthStore(tmp_path)
    UserDirectory(store).close()
    assert store.list_users() == []
    store.close()
    store.close()
