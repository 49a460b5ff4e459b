"""Everything a real agent leaves in its state directory after running a task as another
user (launch record, logs, the shim's files, exit record, outbox, fence) is owned by root
or by the task's user and never readable by others: tasks run as other users and must not
read each other's environment or output, nor the agent's own files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testkit.cgroups import SKIP_REASON
from tests.system.cluster import cluster, submit, wait_state

pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
NOBODY = 65534


def loose_entries(root: Path, owners: set[int]) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_IMODE(st.st_mode) & 0o007 or st.st_uid not in owners:
            found.append(f"{path.relative_to(root)} {stat.S_IMODE(st.st_mode):o} uid {st.st_uid}")
    return found


def test_the_agent_state_dir_holds_nothing_others_can_read(tmp_path: Path) -> None:
    os.umask(0o022)   # the usual umask: the agent must not depend on a strict one
    with cluster(tmp_path, "files") as (master, node, _):
        job_id = submit(master, "--env", "SECRET=s3cr3t", "--", "sh", "-c", "echo out; echo err >&2")
        wait_state(master, job_id, {"SUCCEEDED"})
        state_dir = tmp_path / node
        logs = [p for p in state_dir.rglob("*") if p.is_file() and p.stat().st_uid == NOBODY]
        assert logs, "the task's log files belong to its user"
        assert (state_dir / "outbox.jsonl").exists()
        assert loose_entries(state_dir, {0, NOBODY}) == []
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
