"""auth.db has one opener: the user side and the node side get the same durable settings."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from tcluster.master.identity.sqlite import AUTH_DB, SqliteAuthStore
from tcluster.master.identity.accounts import add_user
from tcluster.master.identity.users import UserDirectory


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


def test_a_second_store_in_the_process_keeps_the_first_ones_writes_visible_to_other_processes(
        tmp_path: Path) -> None:
    """The master opens auth.db more than once (user gate, node guard); an offline command in
    another process then opens and closes it. The master's later writes must reach the file."""
    first = SqliteAuthStore(tmp_path)
    second = SqliteAuthStore(tmp_path)
    read = [sys.executable, "-c", "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
            "print(db.execute('SELECT count(*) FROM join_tokens').fetchone()[0]); db.close()", str(tmp_path / AUTH_DB)]
    assert subprocess.run(read, capture_output=True, text=True, check=True).stdout.strip() == "0"
    first.create_token(60, {}, 1_800_000_000.0)
    assert subprocess.run(read, capture_output=True, text=True, check=True).stdout.strip() == "1"
    first.close()
    second.close()
