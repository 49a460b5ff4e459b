"""Fixtures the system tests share."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from bench.dockerd import Dockerd


@pytest.fixture(scope="module")
def engine() -> Iterator[Dockerd]:
    """A private dockerd for the module's tests (skipped, with the reason, where none can start)."""
    root = Path(tempfile.mkdtemp(prefix="tcl-dk-"))     # short: unix socket paths are limited
    try:
        with Dockerd(root / "d") as d:
            yield d
    except RuntimeError as e:
        pytest.skip(f"cannot start dockerd: {e}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
