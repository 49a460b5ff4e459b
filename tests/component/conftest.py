"""Fixtures shared by the component tests: the in-process master's store."""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401  (the fixture)
from tests.component.harness import STORE


@pytest.fixture(params=["sqlite", "etcd"])
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    """The master's store for a scenario: SQLite in its data dir, or a fresh prefix in a real
    etcd. A module runs every test on both with `pytestmark = pytest.mark.usefixtures("store")`;
    a test for one of them says `@pytest.mark.parametrize("store", ["etcd"], indirect=True)`."""
    if request.param == "etcd":
        member: SingleEtcd = request.getfixturevalue("single_etcd")
        STORE.update(url=member.url, prefix=f"/t-{uuid.uuid4().hex[:10]}")
    try:
        yield request.param
    finally:
        STORE.update(url="", prefix="/tcluster")
