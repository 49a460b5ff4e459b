"""Fixtures of the fault suite: a small disk and a cluster of real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import leaked_cgroups
from testkit.faultcluster import STORES, Cluster, skip_reason
from tests.faults.disk import small_disk  # noqa: F401  (re-exported fixture)


@pytest.fixture(params=STORES)
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A Cluster under tmp_path (start the master yourself: timeouts are per test), once
    per store: every scenario runs against SQLite and against etcd (the session's shared
    etcd cluster, under a prefix of this test's own), so the two stay equivalent. A
    scenario that only means something for one store narrows it with
    `@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)` and says why.
    At teardown every process is stopped by pid and every node swept; fails if anything
    of this test's nodes is still there after the sweep. Process logs are printed on failure."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    store: str = request.param
    c = Cluster(tmp_path, store=store, etcd=request.getfixturevalue("etcd") if store == "etcd" else None)
    try:
        yield c
    finally:
        c.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(c.log_tail())
        left = [path for name in c.agents for path in leaked_cgroups(name)]
        assert left == [], f"cgroups left after the sweep: {left}"
