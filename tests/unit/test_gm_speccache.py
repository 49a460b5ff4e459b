"""A job's cached spec goes when the job has no unfinished task (gm/speccache.py, issue 35)."""

from __future__ import annotations

from pathlib import Path

from tcluster.gm.speccache import drop_ended
from tcluster.gm.store import GMStore


def test_specs_of_ended_jobs_are_dropped_and_others_kept(tmp_path: Path) -> None:
    store = GMStore(str(tmp_path))
    try:
        ids = [store.add_job(0, "a", "j", b"", 3, "") for _ in range(3)]
        specs: dict[str, object] = {job_id: object() for job_id in ids}
        store.ended_many([f"{ids[0]}.{i}" for i in range(3)], "CANCELLED", "cancelled")   # all ended
        store.ended_many([f"{ids[1]}.0", f"{ids[1]}.1"], "CANCELLED", "cancelled")        # one still waits
        assert drop_ended(specs, store.db) == 1
        assert list(specs) == ids[1:]
        store.ended(f"{ids[1]}.2", "SUCCEEDED", 0, "")
        for i in range(3):
            store.ended(f"{ids[2]}.{i}", "FAILED", 1, "")
        assert drop_ended(specs, store.db) == 2 and not specs
        assert [r.state for r in store.tasks("job_id=?", (ids[0],))] == ["CANCELLED"] * 3
    finally:
        store.close()
