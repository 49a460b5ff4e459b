"""Fails when the checked-in generated code is stale: run `make proto`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"


def test_generated_code_matches_the_proto_files(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a test extra: make test installs it")
    sources = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "tcluster" / "v1").glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}", f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", *sources],
        check=True,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated, "protoc produced nothing"
    stale = [str(p) for p in generated if (tmp_path / p).read_bytes() != (PROTO / p).read_bytes()]
    assert not stale, f"generated code is stale, run `make proto`: {stale}"
