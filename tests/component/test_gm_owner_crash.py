"""Issue 35, crash window: a federated job and its owner record are one SQLite transaction.
Before, the owner was written by a second commit after the job's; a GM killed between the
two left a job with no owner whose Places every secure LM refused, for ever. Here a real
process is killed (os._exit, no cleanup) at that point, inside the transaction: after the
restart there is no job, no task and no owner row, the id is not used up, and the client's
resend of the same request id makes the job with its owner."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tcluster.gm.owners import Owners
from tcluster.gm.store import CRASH_BEFORE_OWNER_ENV, GMStore

_SUBMIT = """
import sys
from tcluster.gm.owners import Owners
from tcluster.gm.store import GMStore
store = GMStore(sys.argv[1])
owners = Owners(store.db)
store.add_job(0, "a", "sweep", b"spec", [0, 1, 2], "req-1", also=lambda j: owners.put(j, "alice", "tok"))
print("committed")
"""


def _submit_in_a_process(state: Path, crash: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, CRASH_BEFORE_OWNER_ENV: "1"} if crash else {
        k: v for k, v in os.environ.items() if k != CRASH_BEFORE_OWNER_ENV}
    return subprocess.run([sys.executable, "-c", _SUBMIT, str(state)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_gm_killed_between_the_job_and_its_owner_leaves_no_job_and_a_resend_makes_both(tmp_path: Path) -> None:
    state = tmp_path / "gm"
    killed = _submit_in_a_process(state, crash=True)
    assert killed.returncode == 97, killed.stderr          # died inside the transaction, as SIGKILL would
    assert "committed" not in killed.stdout
    store = GMStore(str(state))                            # the restart
    owners = Owners(store.db)
    assert store.jobs() == [] and store.tasks() == []
    assert store.job_of_request("req-1") is None
    assert store.db.execute("SELECT COUNT(*) FROM job_owners").fetchone()[0] == 0
    store.close()
    again = _submit_in_a_process(state, crash=False)       # the client's resend, same request id
    assert again.returncode == 0, again.stderr
    store = GMStore(str(state))
    owners = Owners(store.db)
    job_id = store.job_of_request("req-1")
    assert job_id == "f0-1"                                # the crashed attempt used no id
    assert owners.owner(job_id) == "alice"
    assert [r.idx for r in store.tasks("job_id=?", (job_id,))] == [0, 1, 2]
    store.close()


def test_an_owner_write_that_fails_takes_the_job_with_it(tmp_path: Path) -> None:
    store = GMStore(str(tmp_path / "gm"))
    Owners(store.db)

    def broken(job_id: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError):
        store.add_job(0, "a", "x", b"spec", 2, "req-2", also=broken)
    assert store.jobs() == [] and store.tasks() == []
    assert store.add_job(0, "a", "x", b"spec", 2, "req-2") == "f0-1"
    store.close()
