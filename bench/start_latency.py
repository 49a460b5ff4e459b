"""Task start latency at the agent: from a launch request handed to the agent's task
manager to the task running in its container (cgroups made and limited, namespaces set
up, exec succeeded: the RUNNING report), p50/p99 over N starts on this host's cgroup
backend. In the same run, when a Docker engine can be started (HOST.md: dockerd with its
own data root, no iptables): our docker backend's start -> running (container created
with the task's limits under our cgroup tree, started, its init watched by a pidfd) beside
the native backend's start -> running measured the same way (the runtime call alone),
`docker run --rm` of a local busybox image, and our own start-to-exit time of `true` for
the like-for-like comparison.

    .venv/bin/python bench/start_latency.py --starts 500 --docker-runs 50

--breakdown N: where a start's time goes (issue 26), p50/p99 per phase over N starts through
the agent's task manager: the runtime's own steps (state directory, cgroups made and
limited, spec written, the shim spawned until its "started" line: fork+exec of the shim,
namespaces, exec of the task; then pid files and pidfd), and what is left around them
(the task manager's bookkeeping and the RUNNING report).

--entry-compare N: on cgroup v1, N runtime starts entering the task's groups through
`tasks` (the shim's way since issue 26: moving the single-threaded child by "0" skips the
kernel's cgroup_threadgroup_rwsem write lock and its RCU grace period) against the old way,
`cgroup.procs`, in alternating blocks of 10, side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.dockerd import Dockerd, docker_missing  # noqa: E402
from tcluster.agent.outbox import Outbox  # noqa: E402
from tcluster.domain.launch import Launch  # noqa: E402
from tcluster.agent.runtime import host_mounts, make_runtime  # noqa: E402
from tcluster.agent.runtime.base import Runtime, TaskSpec  # noqa: E402
from tcluster.agent.runtime.detect import choose_mode  # noqa: E402
from tcluster.agent.runtime.docker import DockerRuntime  # noqa: E402
from tcluster.agent.settings import AgentSettings  # noqa: E402
from tcluster.agent.tasks import TaskManager  # noqa: E402
from tcluster.domain.model import JobSpec, TaskState  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def _wait_report(manager: TaskManager, task_id: str, states: set[TaskState]) -> TaskState:
    while True:
        for _, report in reversed(manager.outbox.unacked()):
            if report.task_id == task_id and report.state in states:
                return report.state
        await asyncio.sleep(0.0005)


async def _wait_gone(manager: TaskManager, key: str) -> None:
    while key in manager.state.attempts:
        await asyncio.sleep(0.001)


_PHASES = iter(range(1, 1000))


async def agent_starts(manager: TaskManager, n: int, command: tuple[str, ...], until_exit: bool) -> list[float]:
    """Seconds from launch() to RUNNING (or, with until_exit, to the exit being reported)."""
    out = []
    job_id = f"{(os.getpid() * 1000 + next(_PHASES)) & 0xffffffff:08x}"
    for i in range(n):
        request = Launch(task_id=f"{job_id}.{i}", attempt=1, job_id=job_id, index=i,
                                spec=JobSpec(command, Resources(0.1, 64 << 20)))
        began = time.perf_counter()
        manager.launch(request)
        want = {TaskState.SUCCEEDED, TaskState.FAILED} if until_exit else {TaskState.RUNNING, TaskState.FAILED}
        state = await _wait_report(manager, request.task_id, want)
        out.append(time.perf_counter() - began)
        assert state in (TaskState.RUNNING, TaskState.SUCCEEDED), manager.outbox.unacked()[-1][1]
        if not until_exit:
            manager.kill(request.task_id, 1, "bench")
        await _wait_gone(manager, request.key)
        manager.outbox.ack(10**9)
    return out


async def measure_agent(state: Path, starts: int, exits: int) -> tuple[str, list[float], list[float]]:
    settings = AgentSettings(node=f"bench-{os.getpid()}", cpus=64, memory_bytes=64 << 30, state_dir=state,
                             kill_grace_s=0)
    runtime = make_runtime("auto", settings.node, state)
    runtime.setup()
    manager = TaskManager(settings, runtime, Outbox())
    try:
        await agent_starts(manager, 5, ("true",), True)                       # warm-up
        running = await agent_starts(manager, starts, ("sleep", "1000"), False)
        exited = await agent_starts(manager, max(exits, 20), ("true",), True)
    finally:
        await manager.settle()       # the last removals run in the background
        runtime.close()
    return runtime.name, running, exited


def runtime_starts(runtime: Runtime, n: int, logs: Path, image: str = "") -> list[float]:
    """Seconds from runtime.start() to its return (the task runs, its exit is watched)."""
    out = []
    for i in range(n):
        key = f"rt{os.getpid()}-{i}.0"
        spec = TaskSpec(key=key, task_id=key, attempt=0, command=("sleep", "1000"), resources=Resources(0.1, 64 << 20),
                        stdout_path=str(logs / f"{key}.out"), stderr_path=str(logs / f"{key}.err"), image=image)
        began = time.perf_counter()
        started = runtime.start(spec)
        out.append(time.perf_counter() - began)
        os.close(started.exit_fd)
        runtime.remove(key)
    return out


def backend_starts(docker: Dockerd, state: Path, n: int) -> tuple[str, list[float], list[float]]:
    """Native and docker backends, alternating in blocks of 10 so drift hits both alike."""
    node = f"bench-{os.getpid()}"
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    native = make_runtime("auto", node, state / "native")
    mounts, controllers = host_mounts()
    dock = DockerRuntime(node, mounts, choose_mode(mounts, controllers), docker.url)
    native.setup()
    dock.setup()
    nat: list[float] = []
    doc: list[float] = []
    try:
        runtime_starts(native, 3, logs)
        runtime_starts(dock, 3, logs, docker.image)                           # warm-up
        for block in range(0, n, 10):
            nat += runtime_starts(native, min(10, n - block), logs)
            doc += runtime_starts(dock, min(10, n - block), logs, docker.image)
    finally:
        native.close()
        dock.close()
    return native.name, nat, doc


def docker_runs(docker: Dockerd, n: int) -> list[float]:
    docker.run("--rm", docker.image, "true")                                  # warm-up
    out = []
    for _ in range(n):
        began = time.perf_counter()
        docker.run("--rm", docker.image, "true")
        out.append(time.perf_counter() - began)
    return out


def breakdown(state: Path, n: int) -> list[str]:
    """Timers around the shim runtime's steps (shimbase.ShimRuntime.start's callees) while
    the task manager starts n tasks; the phases' p50s, and launch -> RUNNING beside them."""
    from tcluster.agent.runtime import launch as launch_mod, shimbase
    phases: dict[str, list[float]] = {}

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases.setdefault(name, []).append(time.perf_counter() - began)
        return wrapper
    patches = [(TaskManager, "_prepare", "launch record (task dir, written durably)"),
               (shimbase.ShimRuntime, "_make_dirs", "state directory"),
               (shimbase, "resolve_user", "user lookup"),
               (shimbase, "write_private", "spec written"),
               (shimbase, "spawn_shim", "shim spawned -> 'started' line"),
               (shimbase.ShimRuntime, "_started", "pid files + pidfd"),
               (launch_mod.subprocess, "Popen", "  of which fork+exec (Popen)")]
    settings = AgentSettings(node=f"bench-{os.getpid()}", cpus=64, memory_bytes=64 << 30, state_dir=state,
                             kill_grace_s=0)
    runtime = make_runtime("auto", settings.node, state)
    runtime.setup()
    inner = getattr(runtime, "native", runtime)          # node.py's wrapper holds the cgroup backend
    prepare_owner = type(inner)
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    saved.append((prepare_owner, "_prepare", prepare_owner._prepare))
    saved.append((type(runtime), "start", type(runtime).start))
    for owner, attr, name in patches:
        setattr(owner, attr, timed(name, getattr(owner, attr)))
    prepare_owner._prepare = timed("cgroups made + limits written", prepare_owner._prepare)
    type(runtime).start = timed("runtime.start() in all", type(runtime).start)
    manager = TaskManager(settings, runtime, Outbox())
    try:
        asyncio.run(agent_starts(manager, 5, ("true",), True))
        phases.clear()
        running = asyncio.run(agent_starts(manager, n, ("sleep", "1000"), False))
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
        asyncio.run(manager.settle())
        runtime.close()
    out = [row(f"{runtime.name}: launch -> RUNNING reported", running)]
    out += [row(name, values[-n:]) for name, values in phases.items()]
    return out


def row(name: str, values: list[float]) -> str:
    return (f"| {name:<44} | {len(values):>5} | {percentile(values, 50) * 1e3:>8.2f} | "
            f"{percentile(values, 99) * 1e3:>8.2f} |")


def entry_compare(state: Path, n: int) -> list[str]:
    """runtime.start() p50 entering by `tasks` vs by `cgroup.procs` (cgroup v1), interleaved."""
    runtime = make_runtime("auto", f"bench-{os.getpid()}", state)
    if runtime.name != "cgroup1":
        return [f"(--entry-compare: runtime {runtime.name}, not cgroup1)"]
    runtime.setup()
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prepare = type(runtime)._prepare
    by: dict[str, list[float]] = {"tasks": [], "cgroup.procs": []}
    try:
        for block in range(max(1, n // 10)):
            name = "tasks" if block % 2 == 0 else "cgroup.procs"
            runtime._prepare = (lambda spec, _n=name: [p.rsplit("/", 1)[0] + "/" + _n  # type: ignore[method-assign]
                                                       for p in prepare(runtime, spec)])
            by[name] += runtime_starts(runtime, 10, logs)
    finally:
        runtime.close()
    ratio = percentile(by["cgroup.procs"], 50) / percentile(by["tasks"], 50)
    return [row("cgroup1 start, entering by `tasks`", by["tasks"]),
            row("cgroup1 start, entering by `cgroup.procs`", by["cgroup.procs"]),
            f"\ncgroup.procs p50 / tasks p50 = {ratio:.2f}x"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=500)
    parser.add_argument("--docker-runs", type=int, default=50)
    parser.add_argument("--entry-compare", type=int, default=0, metavar="N")
    parser.add_argument("--breakdown", type=int, default=0, metavar="N")
    args = parse_quick(parser, {"starts": 5, "docker_runs": 2})
    tmp = Path(tempfile.mkdtemp(prefix="tcl-bench-start-"))
    try:
        if args.breakdown:
            print(f"(load average {os.getloadavg()[0]:.2f})\n| phase | n | p50 ms | p99 ms |\n|---|---:|---:|---:|")
            print("\n".join(breakdown(tmp / "breakdown", args.breakdown)))
            return 0
        if args.entry_compare:
            print("| what | n | p50 ms | p99 ms |\n|---|---:|---:|---:|")
            print("\n".join(entry_compare(tmp / "entry", args.entry_compare)))
            return 0
        name, running, exited = asyncio.run(measure_agent(tmp / "agent", args.starts, args.docker_runs))
        lines = ["| what | n | p50 ms | p99 ms |", "|---|---:|---:|---:|",
                 row(f"tcluster {name}: launch -> running", running),
                 row(f"tcluster {name}: launch -> `true` exited", exited)]
        why = docker_missing() if args.docker_runs > 0 else "--docker-runs 0"
        docker_p50 = 0.0
        if why is None:
            with Dockerd(tmp / "docker") as docker:
                native_name, nat, doc = backend_starts(docker, tmp / "backends", args.docker_runs)
                runs = docker_runs(docker, args.docker_runs)
            docker_p50 = percentile(runs, 50)
            lines += [row(f"tcluster {native_name} backend: start -> running", nat),
                      row("tcluster docker backend: start -> running", doc),
                      row("docker run --rm busybox true", runs)]
        print("\n".join(lines))
        if docker_p50:
            print(f"\ndocker run p50 / tcluster launch->running p50 = {docker_p50 / percentile(running, 50):.1f}x;"
                  f" / launch->exited p50 = {docker_p50 / percentile(exited, 50):.1f}x")
        else:
            print(f"\n(no docker comparison: {why})")
        print(f"goal: p50 launch->running <= 10 ms: {'met' if percentile(running, 50) <= 0.010 else 'NOT met'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
