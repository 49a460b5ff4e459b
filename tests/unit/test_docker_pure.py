"""The docker backend's pure parts: limits in the engine's terms, exit states, times."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tcluster.agent.runtime.base import TaskSpec
from tcluster.agent.runtime.dockerspec import cgroup_roots, exit_from_state, host_config, identity, labels, parse_time
from tcluster.domain.resources import Resources

MI = 2**20


def spec(**kw: object) -> TaskSpec:
    base: dict[str, object] = dict(key="t.1", task_id="t", attempt=1, command=("true",),
                                   resources=Resources(0.5, 64 * MI), stdout_path="/l/out", stderr_path="/l/err",
                                   image="busybox")
    base.update(kw)
    return TaskSpec(**base)  # type: ignore[arg-type]


def test_limits_follow_the_native_rules() -> None:
    cfg = host_config(spec(cpu_limit=0.5, pids_max=64, swap_bytes=16 * MI), "/tcluster/n.docker", 65534)
    assert cfg["cgroup_parent"] == "/tcluster/n.docker"
    assert (cfg["cpu_shares"], cfg["cpu_period"], cfg["cpu_quota"]) == (512, 100_000, 50_000)
    assert (cfg["mem_limit"], cfg["memswap_limit"]) == (64 * MI, 80 * MI)
    assert cfg["pids_limit"] == 64 and cfg["blkio_weight"] == 250
    assert cfg["network_mode"] == "host"


@pytest.mark.parametrize("kw,key,want", [
    ({}, "memswap_limit", 64 * MI),                       # swap off unless asked
    ({"swap_bytes": -1}, "memswap_limit", -1),
    ({"pids_max": 0}, "pids_limit", -1),
    ({"network": "bridge"}, "network_mode", "none"),      # wired by TaskNetworks.attach
    ({"network": "none"}, "network_mode", "none"),
    ({"resources": Resources(100.0, 0)}, "cpu_shares", 102_400),
])
def test_limit_table(kw: dict[str, object], key: str, want: object) -> None:
    assert host_config(spec(**kw), "/p", 65534)[key] == want


def test_no_cap_no_quota_and_a_log_cap_caps_the_engine_copy() -> None:
    cfg = host_config(spec(log_max_bytes=1000), "/p", 65534)
    assert "cpu_quota" not in cfg
    assert cfg["log_config"] == {"type": "json-file", "config": {"max-size": "1000", "max-file": "2"}}


@pytest.mark.parametrize("uid,security_opt,cap_drop", [
    (65534, ["no-new-privileges"], ["ALL"]),      # a setuid file in the image gives nothing
    (1000, ["no-new-privileges"], ["ALL"]),
    (0, ["no-new-privileges"], None),             # root (--allow-root) keeps the engine's default set
])
def test_privileges_table(uid: int, security_opt: list[str], cap_drop: list[str] | None) -> None:
    cfg = host_config(spec(), "/p", uid)
    assert cfg["security_opt"] == security_opt and cfg.get("cap_drop") == cap_drop
    assert "cap_add" not in cfg and "privileged" not in cfg


def test_identity_is_the_nodes_never_the_images() -> None:
    assert identity("nobody")[:2] == (65534, "65534:65534")
    assert identity("") == (os.geteuid(), f"{os.geteuid()}:{os.getegid()}", [])     # the agent's own, as native


@pytest.mark.parametrize("state,want", [
    ({"ExitCode": 0}, (0, 0, False, "")),
    ({"ExitCode": 3}, (3, 0, False, "")),
    ({"ExitCode": 137}, (None, 9, False, "")),
    ({"ExitCode": 137, "OOMKilled": True}, (None, 9, True, "OOMKilled")),
    ({"ExitCode": 143}, (None, 15, False, "")),
    ({"ExitCode": 255, "Error": "boom"}, (255, 0, False, "boom")),
])
def test_exit_states(state: dict[str, object], want: tuple[object, ...]) -> None:
    s = exit_from_state(state)
    assert (s.exit_code, s.signal, s.oom_killed, s.reason) == want


def test_engine_times_with_nanoseconds() -> None:
    assert parse_time("2026-11-23T12:25:40.123456789Z") == pytest.approx(1795436740.123456)
    assert parse_time("0001-01-01T00:00:00Z") == 0.0 and parse_time("") == 0.0


def test_labels_name_the_task_and_its_logs() -> None:
    assert labels(spec(), "n1") == {"tcluster.node": "n1", "tcluster.key": "t.1", "tcluster.task_id": "t",
                                    "tcluster.attempt": "1", "tcluster.stdout": "/l/out",
                                    "tcluster.stderr": "/l/err", "tcluster.log_max_bytes": "0"}


def test_cgroup_roots_include_named_and_unified_hierarchies(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 25 0:27 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"
        "35 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "40 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert cgroup_roots(str(info)) == [Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/systemd"),
                                       Path("/sys/fs/cgroup/unified")]
