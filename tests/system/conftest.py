"""Fixtures the system tests share."""

from __future__ import annotations

import pytest

from bench.dockerd import Dockerd


@pytest.fixture
def engine(docker_engine: Dockerd) -> Dockerd:
    """The session's private dockerd (testkit/docker_engine.py; skipped, with the reason,
    where none can start)."""
    return docker_engine
