"""limits: the cgroup files and values a TaskSpec turns into, v2 and v1; and the writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.agent.runtime.base import LaunchError, TaskSpec
from tcluster.agent.runtime.limits import v1_limits, v2_limits
from tcluster.agent.runtime.writer import write_v1, write_v2
from tcluster.domain.resources import Resources

MI = 2**20


def spec(cpu: float = 1.0, memory: int = 0, cpu_limit: float = 0.0, swap: int = 0,
         pids: int = 4096) -> TaskSpec:
    return TaskSpec(key="t.0", task_id="t", attempt=0, command=("true",),
                    resources=Resources(cpu, memory), stdout_path="/dev/null", stderr_path="/dev/null",
                    pids_max=pids, cpu_limit=cpu_limit, swap_bytes=swap)


V2_CASES = [
    ("one-core", spec(1.0), True,
     [("cpu.weight", "100"), ("memory.swap.max", "0"), ("pids.max", "4096")]),
    ("half-core-64Mi", spec(0.5, 64 * MI), True,
     [("cpu.weight", "50"), ("memory.max", str(64 * MI)), ("memory.swap.max", "0"), ("pids.max", "4096")]),
    ("cap-and-swap", spec(2.0, 128 * MI, cpu_limit=1.5, swap=32 * MI), True,
     [("cpu.weight", "200"), ("cpu.max", "150000 100000"), ("memory.max", str(128 * MI)),
      ("memory.swap.max", str(32 * MI)), ("pids.max", "4096")]),
    ("weight-floor", spec(0.001), True, [("cpu.weight", "1"), ("memory.swap.max", "0"), ("pids.max", "4096")]),
    ("weight-ceiling", spec(500.0), False, [("cpu.weight", "10000"), ("pids.max", "4096")]),
    ("tiny-cap-floors-at-1ms", spec(0.1, cpu_limit=0.001), False,
     [("cpu.weight", "10"), ("cpu.max", "1000 100000"), ("pids.max", "4096")]),
    ("no-pids-limit", spec(1.0, pids=0), False, [("cpu.weight", "100"), ("pids.max", "max")]),
]


@pytest.mark.parametrize("name,task,swap_file,expected", V2_CASES, ids=[c[0] for c in V2_CASES])
def test_v2_limits(name: str, task: TaskSpec, swap_file: bool, expected: list[tuple[str, str]]) -> None:
    assert v2_limits(task, swap_file=swap_file) == expected


V1_CASES = [
    ("one-core", spec(1.0), True, [("cpu", "cpu.shares", "1024"), ("pids", "pids.max", "4096")]),
    ("half-core-64Mi", spec(0.5, 64 * MI), True,
     [("cpu", "cpu.shares", "512"), ("memory", "memory.limit_in_bytes", str(64 * MI)),
      ("memory", "memory.memsw.limit_in_bytes", str(64 * MI)), ("pids", "pids.max", "4096")]),
    ("cap-swap", spec(0.25, 64 * MI, cpu_limit=0.5, swap=16 * MI, pids=32), True,
     [("cpu", "cpu.shares", "256"), ("cpu", "cpu.cfs_period_us", "100000"),
      ("cpu", "cpu.cfs_quota_us", "50000"), ("memory", "memory.limit_in_bytes", str(64 * MI)),
      ("memory", "memory.memsw.limit_in_bytes", str(80 * MI)), ("pids", "pids.max", "32")]),
    ("no-memsw-file", spec(1.0, 64 * MI), False,
     [("cpu", "cpu.shares", "1024"), ("memory", "memory.limit_in_bytes", str(64 * MI)),
      ("pids", "pids.max", "4096")]),
    ("shares-floor", spec(0.0), True, [("cpu", "cpu.shares", "2"), ("pids", "pids.max", "4096")]),
    ("shares-ceiling", spec(1000.0), True, [("cpu", "cpu.shares", "262144"), ("pids", "pids.max", "4096")]),
]


@pytest.mark.parametrize("name,task,memsw,expected", V1_CASES, ids=[c[0] for c in V1_CASES])
def test_v1_limits(name: str, task: TaskSpec, memsw: bool, expected: list[tuple[str, str, str]]) -> None:
    assert v1_limits(task, memsw=memsw) == expected


def test_memory_limit_is_written_before_memsw() -> None:
    files = [f for _, f, _ in v1_limits(spec(1.0, 64 * MI, swap=MI))]
    assert files.index("memory.limit_in_bytes") < files.index("memory.memsw.limit_in_bytes")
    assert files.index("cpu.shares") >= 0


def test_non_finite_cpu_is_a_launch_error() -> None:
    with pytest.raises(LaunchError, match="finite"):
        v2_limits(spec(float("nan")))


def test_writer_v2_and_v1_write_values(tmp_path: Path) -> None:
    for name in ("cpu.weight", "pids.max"):
        (tmp_path / name).write_text("")
    write_v2(tmp_path, [("cpu.weight", "50"), ("pids.max", "64")])
    assert (tmp_path / "cpu.weight").read_text() == "50"
    mem = tmp_path / "mem"
    mem.mkdir()
    (mem / "memory.limit_in_bytes").write_text("")
    write_v1({"memory": mem}, [("memory", "memory.limit_in_bytes", "1024")])
    assert (mem / "memory.limit_in_bytes").read_text() == "1024"


def test_writer_refusal_names_file_and_value(tmp_path: Path) -> None:
    # A missing interface file is what the kernel answers for a controller not enabled.
    with pytest.raises(LaunchError) as err:
        write_v2(tmp_path, [("memory.max", "67108864")])
    assert "'67108864'" in str(err.value) and str(tmp_path / "memory.max") in str(err.value)
    assert not (tmp_path / "memory.max").exists()     # never creates a regular file
