"""The TCluster paper's overhead claim (section 5.3, Figure 7): a CPU-bound and a
memory-bound micro-benchmark take the same time inside a container as outside one. Both
run here in one go, alternating inside (this host's cgroup backend: limits, namespaces,
an unprivileged user) and outside (a plain child process), and the ratios are printed.

    .venv/bin/python bench/container_overhead.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.agent.runtime import make_runtime  # noqa: E402
from tcluster.agent.runtime.base import TaskSpec  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402

PY = "/usr/bin/python3"
# Each prints its own elapsed time, so process start-up is not part of what is compared.
def cpu_bound(ops: int) -> str:
    return ("import time\nt = time.perf_counter()\nx = 0\nfor i in range(%d):\n    x += i * i\n"
            "print(time.perf_counter() - t)") % ops


def memory_bound(mib: int, fills: int) -> str:
    return ("import time\nbuf = bytearray(%d << 20)\nt = time.perf_counter()\n"
            "for _ in range(%d):\n    buf[:] = bytes(len(buf))\nprint(time.perf_counter() - t)") % (mib, fills)


def outside(code: str) -> float:
    return float(subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout)


def inside(runtime, code: str, n: int, tmp: Path) -> float:  # type: ignore[no-untyped-def]
    key = f"ovh{os.getpid()}-{n}.1"
    out = tmp / f"{key}.out"
    spec = TaskSpec(key=key, task_id=key, attempt=1, command=(PY, "-c", code), resources=Resources(1.0, 1 << 30),
                    stdout_path=str(out), stderr_path=str(tmp / f"{key}.err"), user="nobody")
    started = runtime.start(spec)
    select.select([started.exit_fd], [], [])
    os.close(started.exit_fd)
    status = runtime.exit_status(key)
    runtime.remove(key)
    if status.exit_code != 0:
        raise RuntimeError(f"the benchmark failed in its container: {status} {(tmp / f'{key}.err').read_text()}")
    return float(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-ops", type=int, default=8_000_000, help="integer operations of the CPU-bound one")
    parser.add_argument("--fill-mib", type=int, default=256, help="the memory-bound one's buffer")
    parser.add_argument("--fills", type=int, default=12, help="times the memory-bound one fills it")
    args = parse_quick(parser, {"rounds": 1, "cpu_ops": 200_000, "fill_mib": 16, "fills": 2})
    tmp = Path(tempfile.mkdtemp(prefix="tcl-bench-ovh-"))
    os.chmod(tmp, 0o755)
    runtime = make_runtime("auto", f"bench-ovh-{os.getpid()}", tmp / "state")
    runtime.setup()
    try:
        print(f"| benchmark ({runtime.name}) | outside s (median) | inside s (median) | inside/outside |")
        print("|---|---:|---:|---:|")
        for name, code, base in ((f"CPU-bound ({args.cpu_ops / 1e6:g}M integer ops)", cpu_bound(args.cpu_ops), 0),
                                 (f"memory-bound ({args.fills} x {args.fill_mib} MiB fill)",
                                  memory_bound(args.fill_mib, args.fills), 100)):
            out_t, in_t = [], []
            for n in range(args.rounds):        # alternate, so drift on a shared machine hits both
                out_t.append(outside(code))
                in_t.append(inside(runtime, code, n + base, tmp))
            o, i = statistics.median(out_t), statistics.median(in_t)
            print(f"| {name} | {o:.3f} | {i:.3f} | {i / o:.3f} |")
    finally:
        runtime.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
