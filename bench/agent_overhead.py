"""The agent's own cost: RSS and CPU of the tcl-agent process (the real binary, talking to
a real master on 127.0.0.1, 1 s heartbeats) when idle and with N running tasks, each
sampled from its cgroup on every heartbeat. The tasks' shims are reported apart: they are
separate processes, one per task.

    .venv/bin/python bench/agent_overhead.py --tasks 100 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from testkit.procs import BIN, Proc, tcl  # noqa: E402


def measure(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """(RSS MiB at the end, CPU % of one core over the window)."""
    before = proc.cpu_times()
    start = time.monotonic()
    time.sleep(seconds)
    after = proc.cpu_times()
    used = (after.user + after.system) - (before.user + before.system)
    return proc.memory_info().rss / 2**20, 100 * used / (time.monotonic() - start)


def shims(agent: psutil.Process) -> list[psutil.Process]:
    return [c for c in agent.children() if "tcl-shim" in " ".join(c.cmdline())]


def wait_running(master: str, job_id: str, tasks: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = json.loads(tcl(master, "status", job_id, "-o", "json").stdout)
        if sum(t["state"] == "RUNNING" for t in job["tasks"]) == tasks:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{tasks} tasks did not all start within {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=2.0, help="waits before each measure and before the end")
    args = parse_quick(parser, {"tasks": 3, "seconds": 1.0, "settle_s": 0.5})
    tmp = Path(tempfile.mkdtemp(prefix="tcl-bench-overhead-"))
    node = f"bench-ovh-{os.getpid()}"
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / "m"),
                   "--heartbeat-interval-s", "1"], tmp / "master.log")
    agent = None
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        agent = Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node, "--state-dir", str(tmp / "a"),
                      "--cpus", str(args.tasks), "--memory", f"{args.tasks * 64}Mi"], tmp / "agent.log")
        agent.wait_for_output("registered with")
        me = psutil.Process(agent.popen.pid)
        time.sleep(args.settle_s)
        idle = measure(me, args.seconds)
        job = tcl(address, "submit", "--tasks", str(args.tasks), "--cpu", "0.01", "--mem", "16Mi", "--",
                  "sleep", "100000").stdout.strip()
        wait_running(address, job, args.tasks)
        time.sleep(args.settle_s)
        busy = measure(me, args.seconds)
        shim_rss = sum(p.memory_info().rss for p in shims(me)) / 2**20
        n_shims = len(shims(me))
        tcl(address, "cancel", job)
        print("| agent state | RSS MiB | CPU % of one core |\n|---|---:|---:|")
        print(f"| idle | {idle[0]:.1f} | {idle[1]:.2f} |")
        print(f"| {args.tasks} running tasks, 1 s heartbeats | {busy[0]:.1f} | {busy[1]:.2f} |")
        print(f"\nshims: {n_shims} processes, {shim_rss:.1f} MiB RSS in all "
              f"({shim_rss / max(1, n_shims) * 1024:.0f} KiB each)")
        ok = busy[0] < 80 and busy[1] < 2
        print(f"goal: < 80 MB and < 2% of a core with {args.tasks} tasks: {'met' if ok else 'NOT met'}")
        deadline = time.monotonic() + 120
        while json.loads(tcl(address, "status", job, "-o", "json").stdout)["state"] != "CANCELLED":
            if time.monotonic() > deadline:
                raise RuntimeError("the tasks did not stop")
            time.sleep(0.5)
        time.sleep(args.settle_s)           # the last exits reported and their groups removed
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
