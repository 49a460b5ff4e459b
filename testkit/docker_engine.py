"""One private dockerd (bench/dockerd.py) for the whole session, started by the first test
that asks for it and stopped by pid at the end: the image, exec and fence tests share it
instead of each starting their own (a start and an image import each). Skipped, with the
reason, where no dockerd can start. A test removes the containers it made, as the engine
outlives it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from bench.dockerd import Dockerd, docker_missing


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Dockerd]:
    why = docker_missing(cli=False)
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="tcl-dk-"))     # short: unix socket paths are limited
    engine = Dockerd(root / "d")
    try:
        engine.__enter__()          # stops what it started if it cannot come up
    except RuntimeError as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot start dockerd: {e}")
    except BaseException:           # e.g. the image import failed: stop the engine, then fail
        engine.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield engine
    finally:
        engine.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)
