"""usage: RawUsage from canned cgroup file text (v1 and v2), and the cgfs parsers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.agent.runtime.base import RawUsage
from tcluster.agent.runtime.cgfs import closable, is_safe_name, parse_flat_keyed, parse_pids
from tcluster.agent.runtime.cgroup_usage import oom_kills_v1, oom_kills_v2, usage_v1, usage_v2

V2_FILES = {
    "cpu.stat": "usage_usec 1500000\nuser_usec 1200000\nsystem_usec 300000\nnr_periods 10\n"
                "nr_throttled 2\nthrottled_usec 5000\n",
    "memory.current": "5242880\n",
    "memory.peak": "9437184\n",
    "memory.stat": "anon 1048576\nfile 4096\nkernel_stack 16384\nfile_mapped 0\n",
    "memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n",
    "pids.current": "3\n",
    "pids.events": "max 4\n",
}

V1_FILES = {
    "cpuacct.usage": "1500000000\n",
    "cpuacct.stat": "user 120\nsystem 30\n",
    "cpu.stat": "nr_periods 10\nnr_throttled 2\nthrottled_time 5000000\n",
    "memory.usage_in_bytes": "5242880\n",
    "memory.max_usage_in_bytes": "9437184\n",
    "memory.stat": "cache 4096\nrss 1048576\nrss_huge 0\nshmem 0\ntotal_rss 1048576\n",
    "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    "pids.current": "3\n",
    "pids.events": "max 0\n",
}

FULL = RawUsage(at=10.0, cpu_ns=1_500_000_000, user_ns=1_200_000_000, system_ns=300_000_000,
                memory_bytes=5242880, memory_peak_bytes=9437184, anon_bytes=1048576, file_bytes=4096,
                pids=3)


def test_usage_v2() -> None:
    u = usage_v2(V2_FILES, 10.0)
    assert u == RawUsage(**{**FULL.__dict__, "oom_kills": 1, "nr_throttled": 2, "throttled_ns": 5_000_000,
                            "pids_max_hits": 4})


def test_io_swap_and_throttling_v2_and_v1() -> None:
    v2 = usage_v2({**V2_FILES, "memory.swap.current": "4096\n",
                   "io.stat": "8:0 rbytes=100 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n"
                              "8:16 rbytes=5 wbytes=7 rios=1 wios=1 dbytes=0 dios=0\n"}, 1.0)
    assert (v2.io_read_bytes, v2.io_write_bytes, v2.swap_bytes) == (105, 27, 4096)
    v1 = usage_v1({**V1_FILES, "memory.memsw.usage_in_bytes": "6291456\n",
                   "blkio.throttle.io_service_bytes_recursive": "8:0 Read 100\n8:0 Write 20\n8:0 Sync 120\n"
                                                                 "8:0 Total 120\nTotal 120\n"}, 1.0, 100)
    assert (v1.io_read_bytes, v1.io_write_bytes, v1.swap_bytes) == (100, 20, 1048576)


def test_usage_v2_without_memory_peak_reports_zero() -> None:
    files = {k: v for k, v in V2_FILES.items() if k != "memory.peak"}
    assert usage_v2(files, 1.0).memory_peak_bytes == 0


def test_usage_v1_converts_ticks_to_ns() -> None:
    u = usage_v1(V1_FILES, 10.0, clk_tck=100)
    assert u == RawUsage(**{**FULL.__dict__, "oom_kills": 2, "nr_throttled": 2, "throttled_ns": 5_000_000})
    assert usage_v1(V1_FILES, 10.0, clk_tck=250).user_ns == 480_000_000


@pytest.mark.parametrize("text,expected", [
    ("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3),
    ("oom_kill_disable 0\nunder_oom 0\n", 0),      # kernels before 4.13 have no oom_kill line
    ("", 0),
])
def test_oom_kills_v1(text: str, expected: int) -> None:
    assert oom_kills_v1(text) == expected


def test_oom_kills_v2() -> None:
    assert oom_kills_v2(V2_FILES["memory.events"]) == 1
    assert oom_kills_v2("") == 0


def test_missing_and_max_values_are_zero() -> None:
    u = usage_v2({"cpu.stat": "usage_usec 5\n", "memory.current": "max\n"}, 2.0)
    assert (u.cpu_ns, u.memory_bytes, u.pids, u.anon_bytes) == (5000, 0, 0, 0)


@pytest.mark.parametrize("text,expected", [
    ("12\n345\n", [12, 345]),
    ("0\n", []),                  # pid 0 would mean "my own process group" to kill()
    ("", []),
    ("7\n-1\nabc\n", [7]),
])
def test_parse_pids(text: str, expected: list[int]) -> None:
    assert parse_pids(text) == expected


def test_parse_flat_keyed_skips_nested_lines() -> None:
    assert parse_flat_keyed("a 1\nb 2 3\nc x\nd -4\n") == {"a": 1, "d": -4}


@pytest.mark.parametrize("name,ok", [
    ("t-1.0", True), ("node_A.b", True), ("..", False), (".", False), ("a/b", False),
    ("", False), ("a b", False), ("é", False),
])
def test_is_safe_name(name: str, ok: bool) -> None:
    assert is_safe_name(name) is ok


@pytest.mark.parametrize("subtree,created,expected", [
    ("tcluster/n1", [], ["tcluster/n1", "tcluster"]),
    ("tcluster/n1", ["tcluster", "tcluster/n1"], ["tcluster/n1", "tcluster"]),
    # A custom parent: only what setup made, never e.g. a systemd slice it found.
    ("agent.slice/tasks", [], ["agent.slice/tasks"]),
    ("agent.slice/x/tasks", ["agent.slice/x", "agent.slice/x/tasks"], ["agent.slice/x/tasks", "agent.slice/x"]),
])
def test_closable(subtree: str, created: list[str], expected: list[str]) -> None:
    root = Path("/cg")
    got = closable(root, subtree, root / subtree, [root / c for c in created])
    assert got == [root / e for e in expected]


def test_inactive_file_is_read_for_the_working_set_v2_and_hierarchical_v1() -> None:
    v2 = usage_v2({**V2_FILES, "memory.stat": "anon 1048576\nfile 4096\ninactive_file 3072\nactive_file 1024\n"}, 1.0)
    assert v2.inactive_file_bytes == 3072
    v1 = usage_v1({**V1_FILES, "memory.stat": "cache 4096\nrss 1048576\ninactive_file 0\ntotal_inactive_file 2048\n"},
                  1.0, 100)
    assert v1.inactive_file_bytes == 2048         # the subtree's, as memory.usage_in_bytes counts it
    assert usage_v1(V1_FILES, 1.0, 100).inactive_file_bytes == -1    # not in memory.stat: not known
