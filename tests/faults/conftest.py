"""Fixtures of the fault suite: a small disk and a cluster of real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.procs import leaked_cgroups
from tests.faults.cluster import Cluster, skip_reason
from tests.faults.disk import small_disk  # noqa: F401  (re-exported fixture)


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A Cluster under tmp_path (start the master yourself: timeouts are per test). At
    teardown every process is stopped by pid and every node swept; fails if anything of
    this test's nodes is still there after the sweep. Process logs are printed on failure."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(c.log_tail())
        left = [path for name in c.agents for path in leaked_cgroups(name)]
        assert left == [], f"cgroups left after the sweep: {left}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
