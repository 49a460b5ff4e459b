"""Fixtures of the HA suite: each test gets a PRIVATE 3-member etcd cluster (its members
are killed and paused, so never the session's shared one) and an `HACluster` factory."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from testkit.procs import leaked_cgroups
from testkit.etcd_cluster import EtcdCluster, etcd_skip_reason
from testkit.faultcluster import skip_reason
from testkit.hacluster import HACluster

MakeHA = Callable[..., HACluster]


@pytest.fixture
def private_etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    reason = etcd_skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = EtcdCluster(tmp_path, members=3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def ha(tmp_path: Path, private_etcd: EtcdCluster, request: pytest.FixtureRequest) -> Iterator[MakeHA]:
    """`ha(n_masters=3, lease_ttl_s=5, **Cluster fields)` builds the HACluster (start the
    masters yourself). At teardown: every master and agent stopped by pid, nodes swept,
    logs printed on failure, and the test fails if a cgroup of its nodes is left."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    made: list[HACluster] = []

    def make(**kwargs: object) -> HACluster:
        c = HACluster(tmp_path, etcd_cluster=private_etcd, **kwargs)  # type: ignore[arg-type]
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
            rep = getattr(request.node, "rep_call", None)
            if rep is not None and rep.failed:
                print(c.log_tail())
        left = [path for c in made for name in c.agents for path in leaked_cgroups(name)]
        assert left == [], f"cgroups left after the sweep: {left}"
