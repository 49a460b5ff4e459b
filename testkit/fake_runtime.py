"""An in-memory runtime for component tests: no processes, no cgroups.

`true` exits 0 and `false` exits 1 at once; anything else runs until the test calls
`finish()` or the task is signalled. Usage samples are whatever the test sets."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tcluster.agent.runtime.base import ExitStatus, LaunchError, RawUsage, Started, TaskSpec


@dataclass
class _FakeContainer:
    spec: TaskSpec
    read_fd: int
    write_fd: int
    status: ExitStatus | None = None
    usage: RawUsage = field(default_factory=lambda: RawUsage(at=time.time()))


class FakeRuntime:
    name = "fake"

    def __init__(self) -> None:
        self.containers_by_key: dict[str, _FakeContainer] = {}
        self.started: list[TaskSpec] = []
        self.fail_launch: str = ""   # set to make the next start raise LaunchError

    def setup(self) -> None:
        pass

    def start(self, spec: TaskSpec) -> Started:
        if self.fail_launch:
            reason, self.fail_launch = self.fail_launch, ""
            raise LaunchError(reason)
        read_fd, write_fd = os.pipe()
        self.containers_by_key[spec.key] = _FakeContainer(spec, read_fd, write_fd)
        self.started.append(spec)
        if spec.command[0] in ("true", "false"):
            self.finish(spec.key, 0 if spec.command[0] == "true" else 1)
        return Started(pid=0, started_at=time.time(), exit_fd=read_fd)

    def finish(self, key: str, exit_code: int | None = 0, signum: int = 0) -> None:
        container = self.containers_by_key[key]
        if container.status is None:
            container.status = ExitStatus(exit_code, signum, time.time())
            os.write(container.write_fd, b"x")
            os.close(container.write_fd)

    def set_usage(self, key: str, usage: RawUsage) -> None:
        self.containers_by_key[key].usage = usage

    def adopt(self, key: str) -> Started | None:
        return None          # nothing outlives a fake agent

    def exit_status(self, key: str) -> ExitStatus:
        status = self.containers_by_key[key].status
        assert status is not None, f"{key} has not exited"
        return status

    def sample(self, key: str) -> RawUsage | None:
        container = self.containers_by_key.get(key)
        return container.usage if container else None

    def signal(self, key: str, signum: int) -> None:
        if key in self.containers_by_key:
            self.finish(key, None, signum)

    def remove(self, key: str) -> None:
        self.containers_by_key.pop(key, None)

    def containers(self) -> list[str]:
        return sorted(self.containers_by_key)

    def close(self) -> None:
        pass

    def running_keys(self) -> list[str]:
        return sorted(k for k, c in self.containers_by_key.items() if c.status is None)

