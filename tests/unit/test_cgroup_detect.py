"""detect: mountinfo parsing and backend choice, from canned host layouts."""

from __future__ import annotations

import pytest

from tcluster.agent.runtime.base import RuntimeSetupError
from tcluster.agent.runtime.detect import CgroupMounts, choose_mode, parse_controllers, parse_mountinfo

# This development host, copied from /proc/self/mountinfo: hybrid, cpu and cpuacct on
# separate mounts, cgroup2 at /sys/fs/cgroup/unified holding only hugetlb.
HYBRID = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

# A systemd host in unified mode (Debian 11+, Fedora 31+).
PURE_V2 = """\
22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
24 28 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=8137216k,mode=755
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""

# An older systemd host in legacy/hybrid mode: cpu,cpuacct and net_cls,net_prio co-mounted.
V1_COMOUNT = """\
25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
31 25 0:28 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
32 25 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
33 25 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids
34 25 0:31 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,freezer
"""

NO_CGROUPS = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
"""

V2_ALL = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}

PARSE_CASES = [
    ("hybrid", HYBRID, "/sys/fs/cgroup/unified",
     {"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "cpuset": "/sys/fs/cgroup/cpuset",
      "memory": "/sys/fs/cgroup/memory", "devices": "/sys/fs/cgroup/devices",
      "freezer": "/sys/fs/cgroup/freezer", "blkio": "/sys/fs/cgroup/blkio", "pids": "/sys/fs/cgroup/pids"}),
    ("pure-v2", PURE_V2, "/sys/fs/cgroup", {}),
    ("v1-comount", V1_COMOUNT, "/sys/fs/cgroup/unified",
     {"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
      "net_cls": "/sys/fs/cgroup/net_cls,net_prio", "net_prio": "/sys/fs/cgroup/net_cls,net_prio",
      "memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "freezer": "/sys/fs/cgroup/freezer"}),
    ("none", NO_CGROUPS, None, {}),
]


@pytest.mark.parametrize("name,text,v2,v1", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_mountinfo(name: str, text: str, v2: str | None, v1: dict[str, str]) -> None:
    mounts = parse_mountinfo(text)
    assert mounts.v2 == v2
    assert dict(mounts.v1) == v1
    assert "systemd" not in dict(mounts.v1) and "name=systemd" not in dict(mounts.v1)


def test_parse_unescapes_mount_points_and_skips_garbage() -> None:
    text = ("garbage line\n"
            "50 31 0:40 / /mnt/my\\040cgroups rw - cgroup cgroup rw,memory\n"
            "51 31 0:41 / /again rw - cgroup cgroup rw,memory\n")
    mounts = parse_mountinfo(text)
    assert mounts.v1_path("memory") == "/mnt/my cgroups"    # first mount wins


CHOOSE_CASES = [
    # (id, mountinfo, v2 controllers, requested, expected mode or error fragments)
    ("hybrid-auto", HYBRID, {"hugetlb"}, "auto", "cgroup1"),
    ("hybrid-v1", HYBRID, {"hugetlb"}, "cgroup1", "cgroup1"),
    ("hybrid-v2", HYBRID, {"hugetlb"}, "cgroup2",
     ["cgroup2 is not usable", "/sys/fs/cgroup/unified lacks the cpu, memory, pids", "cgroup v1 would work"]),
    ("v2-auto", PURE_V2, V2_ALL, "auto", "cgroup2"),
    ("v2-v2", PURE_V2, V2_ALL, "cgroup2", "cgroup2"),
    ("v2-v1", PURE_V2, V2_ALL, "cgroup1",
     ["cgroup1 is not usable", "no hierarchy is mounted for cpu, cpuacct, memory, pids, freezer",
      "systemd.unified_cgroup_hierarchy=0", "cgroup v2 would work"]),
    ("v2-no-memory", PURE_V2, {"cpu", "pids"}, "auto", ["lacks the memory", "no hierarchy"]),
    ("comount-auto", V1_COMOUNT, set(), "auto", "cgroup1"),
    ("none-auto", NO_CGROUPS, set(), "auto",
     ["no cgroup backend works", "no cgroup2 filesystem is mounted", "no hierarchy is mounted",
      "--runtime process"]),
    ("bad-request", HYBRID, set(), "cgroup3", ["unknown cgroup mode"]),
]


@pytest.mark.parametrize("name,text,controllers,requested,expected", CHOOSE_CASES,
                         ids=[c[0] for c in CHOOSE_CASES])
def test_choose_mode(name: str, text: str, controllers: set[str], requested: str,
                     expected: str | list[str]) -> None:
    mounts = parse_mountinfo(text)
    if isinstance(expected, str):
        assert choose_mode(mounts, controllers, requested) == expected
        return
    with pytest.raises(RuntimeSetupError) as err:
        choose_mode(mounts, controllers, requested)
    for fragment in expected:
        assert fragment in str(err.value)


def test_v1_without_freezer_is_not_enough() -> None:
    mounts = CgroupMounts(v1=(("cpu", "/c"), ("cpuacct", "/c"), ("memory", "/m"), ("pids", "/p")))
    with pytest.raises(RuntimeSetupError, match="freezer"):
        choose_mode(mounts, set(), "auto")


def test_parse_controllers() -> None:
    assert parse_controllers("cpuset cpu io memory pids\n") == {"cpuset", "cpu", "io", "memory", "pids"}
    assert parse_controllers("") == set()
