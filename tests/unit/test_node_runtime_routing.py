"""NodeRuntime routes by task: image -> docker, else native; refusals before anything
starts. Fakes stand in for both backends; networks are not involved here."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tcluster.agent.runtime.base import LaunchError, RawUsage, RuntimeSetupError, TaskSpec
from testkit.fake_runtime import FakeRuntime
from tcluster.agent.runtime.node import NodeRuntime
from tcluster.domain.resources import Resources


class FakeDocker(FakeRuntime):
    name = "docker"

    def __init__(self, fail_setup: str = "") -> None:
        super().__init__()
        self.fail_setup = fail_setup

    def setup(self) -> None:
        if self.fail_setup:
            raise RuntimeSetupError(self.fail_setup)

    def containers(self) -> list[str]:
        return sorted(self.containers_by_key)


def spec(key: str, **kw: Any) -> TaskSpec:
    return TaskSpec(key=key, task_id=key, attempt=0, command=("sleep", "1"), resources=Resources(0.1, 1),
                    stdout_path="", stderr_path="", **kw)


def test_images_go_to_docker_and_the_rest_to_native() -> None:
    native, docker = FakeRuntime(), FakeDocker()
    rt = NodeRuntime(native, docker)  # type: ignore[arg-type]
    rt.setup()
    assert rt.name == "fake+docker"
    for started in (rt.start(spec("n.0")), rt.start(spec("d.0", image="busybox"))):
        os.close(started.exit_fd)
    assert [s.key for s in native.started] == ["n.0"] and [s.key for s in docker.started] == ["d.0"]
    docker.set_usage("d.0", RawUsage(at=1.0, pids=3))
    assert rt.sample("d.0") == RawUsage(at=1.0, pids=3)
    assert rt.containers() == ["d.0", "n.0"]


def test_a_fresh_object_finds_docker_containers_by_asking_the_engine() -> None:
    native, docker = FakeRuntime(), FakeDocker()
    os.close(docker.start(spec("d.0", image="busybox")).exit_fd)
    rt = NodeRuntime(native, docker)  # type: ignore[arg-type]
    docker.set_usage("d.0", RawUsage(at=2.0))
    assert rt.sample("d.0") == RawUsage(at=2.0)


def test_a_dead_engine_leaves_native_tasks_running() -> None:
    rt = NodeRuntime(FakeRuntime(), FakeDocker(fail_setup="docker backend unavailable: no engine"))  # type: ignore[arg-type]
    rt.setup()
    assert rt.name == "fake" and rt.docker_problem == "docker backend unavailable: no engine"
    with pytest.raises(LaunchError, match="cannot run images: docker backend unavailable"):
        rt.start(spec("d.0", image="busybox"))
    os.close(rt.start(spec("n.0")).exit_fd)


@pytest.mark.parametrize("kw,match", [({"network": "bridge"}, "task networks are off"),
                                      ({"net_rate_bps": 1e6}, "needs network mode bridge")])
def test_network_requests_without_networks_are_refused(kw: dict[str, Any], match: str) -> None:
    native = FakeRuntime()
    rt = NodeRuntime(native)
    with pytest.raises(LaunchError, match=match):
        rt.start(spec("x.0", **kw))
    assert native.started == []
