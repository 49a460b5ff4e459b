"""What the agent holds: one `Runtime` made of the native backend (cgroup2/cgroup1/process),
an optional docker backend and the node's task networks. It routes by task: a spec with
an image goes to docker, any other to the native backend; a network mode other than
`host` gets its own namespace around either. The agent's task manager keeps calling the
one Runtime interface and needs no branch of its own.

Native tasks enter their namespace without any change to the shim: the shim is spawned
from a thread that has entered the namespace (see netns.run_in_netns), and a child starts
in its creator thread's namespaces."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from .base import ExitStatus, LaunchError, RawUsage, Runtime, RuntimeSetupError, Started, TaskSpec
from .docker import DockerRuntime
from .netns import run_in_netns
from .tasknet import TaskNetworks

log = logging.getLogger(__name__)


class NodeRuntime:
    def __init__(self, native: Runtime, docker: DockerRuntime | None = None, nets: TaskNetworks | None = None) -> None:
        self.native, self.docker, self.nets = native, docker, nets
        self.docker_problem: str | None = None if docker is not None else "no docker host configured"
        self._owner: dict[str, Runtime] = {}

    @property
    def name(self) -> str:
        return self.native.name + ("+docker" if self.docker is not None else "")

    # -- lifecycle ----------------------------------------------------------------------------
    def setup(self) -> None:
        """Native first (its failure stops the agent); docker's failure only disables docker
        tasks; then the networks, sweeping whatever belongs to no container left."""
        self.native.setup()
        if self.docker is not None:
            try:
                self.docker.setup()
            except RuntimeSetupError as e:
                log.warning("%s; this node runs native tasks only", e)
                self.docker_problem, self.docker = str(e), None
        if self.nets is not None:
            self.nets.setup(keep=self.containers())

    def close(self) -> None:
        self.native.close()
        if self.docker is not None:
            self.docker.close()
        if self.nets is not None:
            self.nets.close()

    # -- start ----------------------------------------------------------------------------
    def _backend(self, spec: TaskSpec) -> Runtime:
        if not spec.image:
            return self.native
        if self.docker is None:
            raise LaunchError(f"this node cannot run images: {self.docker_problem}")
        return self.docker

    def start(self, spec: TaskSpec) -> Started:
        backend = self._backend(spec)
        networked = spec.network not in ("", "host")
        if networked and self.nets is None:
            raise LaunchError(f"network mode {spec.network!r}: task networks are off on this node (agent --net)")
        if spec.network in ("", "host") and (spec.net_rate_bps or spec.net_ceil_bps):
            raise LaunchError("a network rate needs network mode bridge (host networking is shared)")
        if backend is self.docker:
            started = self._start_docker(spec)
        else:
            started = self._start_native(spec) if networked else self.native.start(spec)
        self._owner[spec.key] = backend
        return started

    def _start_native(self, spec: TaskSpec) -> Started:
        assert self.nets is not None
        plan = self.nets.prepare(spec)
        assert plan is not None
        try:
            return run_in_netns(plan.netns_path, self.native.start, spec)
        except BaseException:
            self.nets.release(spec.key)
            raise

    def _start_docker(self, spec: TaskSpec) -> Started:
        assert self.docker is not None
        started = self.docker.start(spec)
        if spec.network in ("", "host"):
            return started
        assert self.nets is not None
        try:
            self.nets.attach(spec, started.pid)
        except BaseException:
            os.close(started.exit_fd)
            self.docker.remove(spec.key)
            raise
        return started

    # -- per task -------------------------------------------------------------------------
    def _of(self, key: str) -> Runtime:
        owner = self._owner.get(key)
        if owner is None:
            owner = self.docker if self.docker is not None and key in self.docker.containers() else self.native
            self._owner[key] = owner
        return owner

    def adopt(self, key: str) -> Started | None:
        return self._of(key).adopt(key)

    def exit_status(self, key: str) -> ExitStatus:
        return self._of(key).exit_status(key)

    def sample(self, key: str) -> RawUsage | None:
        """The backend's counters, plus the task's network bytes when it has a link of its own."""
        raw = self._of(key).sample(key)
        counters = self.nets.counters(key) if self.nets is not None and raw is not None else None
        if raw is None or counters is None:
            return raw
        return replace(raw, net_tx_bytes=counters.tx_bytes, net_rx_bytes=counters.rx_bytes)

    def signal(self, key: str, signum: int) -> None:
        self._of(key).signal(key, signum)

    def remove(self, key: str) -> None:
        self._of(key).remove(key)
        if self.nets is not None:
            self.nets.release(key)
        self._owner.pop(key, None)

    def containers(self) -> list[str]:
        keys = set(self.native.containers())
        if self.docker is not None:
            for key in self.docker.containers():
                self._owner[key] = self.docker
                keys.add(key)
        return sorted(keys)
