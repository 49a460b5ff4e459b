"""The docker backend: a task with an image runs as a container of a Docker engine.

Containers sit under the agent's own cgroup tree (cgroup_parent /tcluster/<node>.docker,
cgroupfs driver: a sibling of the native tasks' tcluster/<node>, whose every subdirectory
the native backend takes for one of its own), with the same limits as a native task, so
the same cgroup readers (usage.py) feed the heartbeats. Every container carries labels
tcluster.node/.key/.task_id/.attempt; the engine is the record of what runs.

- exit_fd: a pidfd of the container's init (State.Pid): readable when it has exited.
- exit status: the engine's State after it has seen the exit (ExitCode, OOMKilled).
- logs: copied from the engine into spec.stdout_path/stderr_path (dockerlogs.py).
- networks: `host` shares the node's; `none`/`bridge` start with network_mode=none and the
  caller wires the container's namespace (TaskNetworks.attach) after start."""

from __future__ import annotations

import logging
import os
import signal as signals
import time
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from tcluster.daemonkit.sdnotify import SYSTEMD_ONLY_ENV

from .base import ExitStatus, LaunchError, RawUsage, RuntimeSetupError, Started, TaskSpec
from .dockerfence import fenced, forget, prune, start_watch
from .cgfs import is_safe_name, read_pids, read_text, remove_if_empty, rmdir_cgroup, signal_pids
from .detect import CgroupMounts
from .dockerlogs import LogCopier
from .dockerspec import (CONTAINER_SCRIPT_DIR, LABEL, LEASE_LABEL, cgroup_roots, container_command, container_name,
                         exit_from_state, host_config, identity, labels, parse_time, ready_fd, script_archive)
from .cgroup_usage import V1_FILES, V2_FILES, usage_v1, usage_v2

log = logging.getLogger(__name__)
DEFAULT_HOST = "unix:///var/run/docker.sock"
WAIT_TIMEOUT_S = 30
ENGINE_TIMEOUT_S = 30


def docker_available(host: str = DEFAULT_HOST) -> str | None:
    """None when an engine answers at `host` with a driver we can place cgroups with; else
    why not (for the node's attributes and the agent's log)."""
    try:
        client = docker.DockerClient(base_url=host, timeout=5)
    except DockerException as e:
        return f"no docker engine at {host}: {e}"
    try:
        info = client.info()
    except (DockerException, OSError) as e:
        return f"the docker engine at {host} does not answer: {e}"
    finally:
        client.close()
    driver = info.get("CgroupDriver", "")
    if driver != "cgroupfs":
        return (f"the docker engine at {host} uses the {driver or 'unknown'} cgroup driver; tcluster places "
                "containers in its own tree and needs cgroupfs (dockerd --exec-opt native.cgroupdriver=cgroupfs)")
    return None


class DockerRuntime:
    name = "docker"

    def __init__(self, node: str, mounts: CgroupMounts, mode: str, host: str = DEFAULT_HOST,
                 fence_dir: Path | None = None) -> None:
        """`mounts` and `mode` (cgroup1|cgroup2) are the host's, as the native backend found
        them: the container's cgroup files are read from there. `fence_dir`: where the fence
        watchers of containers with a lease keep their state (dockerfence.py); None: none."""
        self.node, self.host, self._mounts, self._mode = node, host, mounts, mode
        self._fence_dir = fence_dir
        self.parent = f"tcluster/{node}.docker"
        self._client: docker.APIClient | None = None
        self._copiers: dict[str, LogCopier] = {}
        self._ids: dict[str, str] = {}      # key -> container id: sample() asks no engine

    # -- engine ---------------------------------------------------------------------------
    def setup(self) -> None:
        if not is_safe_name(self.node):
            raise RuntimeSetupError(f"node name {self.node!r} cannot name a cgroup: use only A-Za-z0-9_.-")
        why = docker_available(self.host)
        if why is not None:
            raise RuntimeSetupError(f"docker backend unavailable: {why}")
        self._client = docker.APIClient(base_url=self.host, timeout=ENGINE_TIMEOUT_S)
        if self._fence_dir is not None:
            try:
                forgotten = prune(self._fence_dir, set(self.containers()))
            except (DockerException, OSError) as e:     # the engine's listing: next start tries again
                log.warning("fence files not pruned: %s", _msg(e))
            else:
                if forgotten:
                    log.info("forgot the fence files of %d container(s) no longer in the engine", len(forgotten))

    @property
    def api(self) -> docker.APIClient:
        if self._client is None:
            raise LaunchError("the docker backend is not set up on this node")
        return self._client

    def _find(self, key: str) -> dict[str, Any] | None:
        """The container's inspect record; None when it does not exist."""
        try:
            info = self.api.inspect_container(container_name(self.node, key))
        except NotFound:
            self._ids.pop(key, None)
            return None
        self._ids[key] = info["Id"]
        return info

    def _id(self, key: str) -> str | None:
        if key not in self._ids:
            self._find(key)
        return self._ids.get(key)

    # -- start ----------------------------------------------------------------------------
    def _ensure_image(self, image: str) -> None:
        try:
            self.api.inspect_image(image)
            return
        except ImageNotFound:
            pass
        try:
            self.api.pull(image)
        except (APIError, DockerException) as e:
            raise LaunchError(f"image {image!r} is not on this node and cannot be pulled: {_msg(e)}") from e

    def start(self, spec: TaskSpec) -> Started:
        if not is_safe_name(spec.key):
            raise LaunchError(f"container key {spec.key!r} must use only A-Za-z0-9_.-")
        if not spec.image:
            raise LaunchError("a docker task needs an image")
        uid, user, groups = identity(spec.user)     # before anything exists: nothing to undo
        try:
            self._ensure_image(spec.image)
            cid = self._create(spec, uid, user, groups)
        except (DockerException, OSError) as e:
            raise LaunchError(f"docker engine at {self.host}: {_msg(e)}") from e
        try:
            self.api.start(cid)
            info = self.api.inspect_container(cid)
            started = self._watch(spec.key, info, spec)
            self._fence_without_agent(spec.key, info)
            return started
        except BaseException as e:
            self._discard(cid)
            if isinstance(e, (DockerException, OSError)):
                raise LaunchError(f"cannot start the container: {_msg(e)}") from e
            raise

    def _create(self, spec: TaskSpec, uid: int, user: str, groups: list[str]) -> str:
        cfg = host_config(spec, "/" + self.parent, uid)
        if groups:
            cfg["group_add"] = groups
        try:
            made = self.api.create_container(
                spec.image, command=container_command(spec.command) or None, name=container_name(self.node, spec.key),
                user=user, environment=[f"{k}={v}" for k, v in spec.env if k not in SYSTEMD_ONLY_ENV], working_dir=spec.workdir or None,
                labels=labels(spec, self.node), host_config=self.api.create_host_config(**cfg),
                stdin_open=False, tty=False)
        except APIError as e:
            if e.status_code == 409:
                raise LaunchError(f"container {spec.key} already exists") from e
            raise
        if spec.script:
            gid = int(user.partition(":")[2] or uid)
            try:
                self.api.put_archive(made["Id"], CONTAINER_SCRIPT_DIR, script_archive(spec.script, uid, gid))
            except BaseException:
                self._discard(made["Id"])
                raise
        return made["Id"]

    def _watch(self, key: str, info: dict[str, Any], spec: TaskSpec | None) -> Started:
        """pidfd of the container's init, and the log copy. A container that has already
        ended gets an fd that is readable at once."""
        state = info["State"]
        pid = int(state.get("Pid") or 0)
        fd = None
        if state.get("Running") and pid > 0:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                fd = None
            # Checked after opening: the fd now pins the process, so a pid recycled between
            # inspect and pidfd_open is caught here.
            if fd is not None and (self._find(key) or {}).get("State", {}).get("Pid") != pid:
                os.close(fd)
                fd = None
        self._copy_logs(key, info, spec)
        return Started(pid, parse_time(state.get("StartedAt", "")) or time.time(), fd if fd is not None else ready_fd())

    def _copy_logs(self, key: str, info: dict[str, Any], spec: TaskSpec | None) -> None:
        paths = _log_paths(info, spec)
        if paths is None:
            return
        cid, host, version = info["Id"], self.host, self.api.api_version

        def stream(is_err: bool) -> Any:
            # A client of its own without read timeout: a quiet task is no error.
            client = docker.APIClient(base_url=host, timeout=None, version=version)
            return client.logs(cid, stdout=not is_err, stderr=is_err, stream=True, follow=True)
        self._copiers[key] = LogCopier(stream, *paths).start()

    def _discard(self, cid: str) -> None:
        try:
            self.api.remove_container(cid, force=True)
        except (DockerException, OSError) as e:
            log.warning("cleanup after a failed start of %s: %s", cid, e)

    # -- running and after ----------------------------------------------------------------
    def adopt(self, key: str) -> Started | None:
        info = self._find(key)
        if info is None or not info["State"].get("Running"):
            return None
        started = self._watch(key, info, None)
        if not info["State"].get("Running"):
            return None
        self._fence_without_agent(key, info)     # its watcher may run on: then none is added
        return started

    def _fence_without_agent(self, key: str, info: dict[str, Any]) -> None:
        """A container with a lease gets its fence watcher (dockerfence.py)."""
        lease = ((info.get("Config") or {}).get("Labels") or {}).get(LEASE_LABEL, "")
        pid = int(info["State"].get("Pid") or 0)
        if lease and self._fence_dir is not None and pid > 0:
            procs = [d / "cgroup.procs" for d in self._cgroup_dirs(info["Id"]).values()]
            start_watch(self._fence_dir, key, lease, pid, procs)

    def exit_status(self, key: str) -> ExitStatus:
        info = self._find(key)
        if info is None:
            return ExitStatus(None, 0, time.time(), False, "the container is gone (removed from the engine)")
        if info["State"].get("Running"):
            try:                            # the pid has exited; the engine hears of it shortly
                self.api.wait(info["Id"], timeout=WAIT_TIMEOUT_S)
            except (DockerException, OSError) as e:
                return ExitStatus(None, 0, time.time(), False, f"cannot learn the exit from the engine: {_msg(e)}")
            info = self._find(key) or info
        copier = self._copiers.pop(key, None)
        if copier is None:                  # ended while the agent was away: copy it all now
            self._copy_logs(key, info, None)
            copier = self._copiers.pop(key, None)
        if copier is not None and not copier.join():
            log.warning("the log copy of %s did not finish", key)
        status = exit_from_state(info["State"])
        return fenced(self._fence_dir, key, status) if self._fence_dir is not None else status

    def _cgroup_dirs(self, cid: str) -> dict[str, Path]:
        rel = f"{self.parent}/{cid}"
        if self._mode == "cgroup2":
            return {"": Path(self._mounts.v2 or "/sys/fs/cgroup") / rel}
        return {c: Path(p) / rel for c, p in self._mounts.v1}

    def sample(self, key: str) -> RawUsage | None:
        """From the container's cgroup files (the engine is not asked: heartbeats call this
        for every task). None once the container's groups are gone."""
        cid = self._id(key) if is_safe_name(key) else None
        if cid is None:
            return None
        dirs = self._cgroup_dirs(cid)
        files: dict[str, str] = {}
        if self._mode == "cgroup2":
            wanted = [(name, dirs[""] / name) for name in V2_FILES]
        else:
            wanted = [(name, dirs[c] / name) for c, name in V1_FILES if c in dirs]
        for name, path in wanted:
            text = read_text(path)
            if text is not None:
                files[name] = text
        if self._mode == "cgroup2":
            return usage_v2(files, time.time()) if "cpu.stat" in files else None
        return usage_v1(files, time.time(), os.sysconf("SC_CLK_TCK")) if "cpuacct.usage" in files else None

    def signal(self, key: str, signum: int) -> None:
        cid = self._id(key) if is_safe_name(key) else None
        if cid is None:
            return
        if signum == signals.SIGKILL:
            # The init dies and its PID namespace with it: nothing escapes by forking.
            try:
                self.api.kill(cid, signal=int(signum))
            except APIError as e:
                if e.status_code not in (404, 409):      # gone, or not running
                    raise OSError(f"cannot kill container {key}: {_msg(e)}") from e
            return
        # Like the native backends: every process of the container, not just its init.
        procs = self._cgroup_dirs(cid).get("pids" if self._mode == "cgroup1" else "")
        if procs is not None:
            signal_pids(read_pids(procs / "cgroup.procs"), signum)

    def remove(self, key: str) -> None:
        if not is_safe_name(key) or self._client is None:
            return
        copier = self._copiers.pop(key, None)
        if copier is not None:
            copier.stopping = True
        info = self._find(key)
        if info is not None:
            try:
                self.api.remove_container(info["Id"], force=True)
            except NotFound:
                pass
            except APIError as e:
                raise OSError(f"cannot remove container {key}: {_msg(e)}") from e
            for d in (root / self.parent / info["Id"] for root in cgroup_roots()):
                try:
                    rmdir_cgroup(d)         # the engine removes them; this only makes sure
                except OSError as e:
                    log.warning("cgroup of container %s left behind: %s", key, e)
        self._ids.pop(key, None)
        if self._fence_dir is not None:
            forget(self._fence_dir, key)
        if copier is not None:
            copier.join(1.0)

    def containers(self) -> list[str]:
        if self._client is None:
            return []
        found = self.api.containers(all=True, filters={"label": [f"{LABEL}.node={self.node}"]})
        return sorted(c["Labels"][f"{LABEL}.key"] for c in found if is_safe_name(c["Labels"].get(f"{LABEL}.key", "")))

    def close(self) -> None:
        """Remove our parent groups if empty (running containers keep them)."""
        for root in cgroup_roots():
            # The shared top group goes too when nobody uses it (as the native close does).
            remove_if_empty([root / self.parent, root / "tcluster"])
        if self._client is not None:
            self._client.close()
            self._client = None


def _log_paths(info: dict[str, Any], spec: TaskSpec | None) -> tuple[str, str, int] | None:
    """Where the task's output goes: from the spec at start; after a restart, from the
    labels we left on the container."""
    if spec is not None:
        return spec.stdout_path, spec.stderr_path, spec.log_max_bytes
    lab = info.get("Config", {}).get("Labels") or {}
    out, err = lab.get(f"{LABEL}.stdout", ""), lab.get(f"{LABEL}.stderr", "")
    return (out, err, int(lab.get(f"{LABEL}.log_max_bytes", "0") or 0)) if out or err else None


def _msg(e: BaseException) -> str:
    explanation = getattr(e, "explanation", None)
    return str(explanation or e)
