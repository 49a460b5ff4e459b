"""The same code at an older revision and now, side by side in one run (issue 11): the
module is loaded from `git show REV:PATH` next to today's package, runs interleaved on the
same inputs, and the decisions are compared.

  mch    per-decision time of `mch` then and now, and flat `drf`, on bench/fairness.py's
         workloads (binary trees of 2-5 levels, 100-10,000 trace-shaped jobs)
         (--opcodes: bytecode instructions per decision instead, the same on any load)
  round  one scheduling round placing --tasks tasks of --jobs jobs on --nodes nodes
         (the burst of bench/cluster_scale.py), scheduler/round.py then and now

    .venv/bin/python bench/compare_revisions.py mch [--rev e307186]
    .venv/bin/python bench/compare_revisions.py round [--rev e307186] [--nodes 10000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.fairness import binary_tree, google_jobs, pool, timed_round  # noqa: E402
from tcluster.domain.model import Job, JobSpec, Task  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.scheduler.fairness import make_fairness  # noqa: E402
from tcluster.scheduler.nodestate import NodeMatrix  # noqa: E402
from tcluster.scheduler.placement import make_placement  # noqa: E402
from tcluster.scheduler.round import schedule_round  # noqa: E402

GiB = 2**30
# Modules that moved since the revisions this compares with (issue 32's rooms): an old module
# imports them by their old names, which point at today's modules while it loads.
MOVED = {f"tcluster.{old}": f"tcluster.{new}" for old, new in (
    ("model", "domain.model"), ("resources", "domain.resources"), ("units", "domain.units"),
    ("arrays", "domain.arrays"), ("dependency", "domain.dependency"), ("constraints", "domain.constraints"),
    ("specfields", "domain.specfields"), ("taskusage", "domain.taskusage"), ("ceilings", "domain.ceilings"),
    ("states", "domain.states"), ("lifecycle", "domain.lifecycle"), ("nodelabels", "domain.nodelabels"),
    ("nodeops", "domain.nodeorders"), ("errors", "domain.errors"), ("bounds", "domain.bounds"),
    ("launch", "domain.launch"), ("reports", "domain.reports"), ("gpuusage", "domain.gpuusage"),
    ("queuerow", "views.queuerow"), ("formats", "views.formats"))}


# The modules scheduler/mch.py is made of at the revisions compared (its mixins, and
# fairshare for share_key): each is loaded from the old revision too, where it exists there,
# so "then" is that revision's MCH whole; today's drf runs beside both.
MCH_PARTS = ("fairshare", "mchpropagate", "mchusers", "mchfactors")


def load_old(rev: str, path: str, name: str, parts: tuple[str, ...] = ()) -> ModuleType:
    """`path` as it was at `rev`, as module `name`. Each of `parts` (modules of
    tcluster.scheduler it imports) is the one of `rev` while it loads, today's again after."""
    for old, new in MOVED.items():
        sys.modules.setdefault(old, importlib.import_module(new))
    saved = {}
    try:
        for part in parts:
            full = f"tcluster.scheduler.{part}"
            if _exists_at(rev, f"scheduler/{part}.py"):
                saved[full] = sys.modules.get(full)
                sys.modules[full] = _load_source(rev, f"scheduler/{part}.py", f"{name}_{part}")
        return _load_source(rev, path, name)
    finally:
        for full, module in saved.items():
            if module is None:
                sys.modules.pop(full, None)
            else:
                sys.modules[full] = module


def _exists_at(rev: str, path: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{path}"],
                          capture_output=True).returncode == 0


def _load_source(rev: str, path: str, name: str) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                            capture_output=True, text=True).stdout
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def decide(policy, jobs, capacity, tree, most: int = 20000) -> tuple[float, list[str]]:  # type: ignore[no-untyped-def]
    """Seconds per decision in the policy's calls (as bench/fairness.py), and the picks."""
    spent, picks = timed_round(policy.start_round(jobs, capacity, tree), jobs, capacity, most)
    return spent / max(1, len(picks)), picks


def opcodes(policy, jobs, capacity, tree, most: int) -> tuple[float, list[str]]:  # type: ignore[no-untyped-def]
    """Bytecode instructions run per decision in the policies' own code (scheduler/ and the
    old module), not in this harness: a count, so the same on a quiet or a loaded host."""
    count = [0]

    def local(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "opcode":
            count[0] += 1
        return local

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        name = frame.f_code.co_filename
        if "/scheduler/" in name or "/mch_then" in name:
            frame.f_trace_opcodes = True
            return local
        return None

    rnd = policy.start_round(jobs, capacity, tree)
    sys.settrace(tracer)
    try:
        _, picks = timed_round(rnd, jobs, capacity, most)
    finally:
        sys.settrace(None)
    return count[0] / max(1, len(picks)), picks


def compare_mch(args: argparse.Namespace) -> int:
    old = load_old(args.rev, "scheduler/mch.py", "mch_then", MCH_PARTS)
    if args.opcodes:
        return compare_mch_opcodes(args, old)
    print(f"mch at {args.rev} vs now, per decision; fastest of {args.repeat} interleaved runs; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'levels':>6} {'jobs':>6} {'drf us':>7} {'mch then':>9} {'mch now':>8} {'then/drf':>9} {'now/drf':>8} "
          f"{'speedup':>8}  same picks")
    capacity, same, worst, slowest = pool(), True, (0.0, ""), (float("inf"), "")
    for levels in (int(x) for x in args.levels.split(",")):
        tree = binary_tree(levels)
        for count in (int(x) for x in args.job_counts.split(",")):
            jobs = google_jobs(count, tree.leaves, random.Random(1))
            best: dict[str, tuple[float, list[str]]] = {}
            for _ in range(args.repeat):
                for name, make in (("drf", lambda: make_fairness("drf")), ("then", old.MchPolicy),
                                   ("now", lambda: make_fairness("mch"))):
                    got = decide(make(), jobs, capacity, tree, args.decisions)
                    if name not in best or got[0] < best[name][0]:
                        best[name] = got
            d, t, n = best["drf"][0], best["then"][0], best["now"][0]
            equal = best["then"][1] == best["now"][1]
            same &= equal
            worst = max(worst, (n / d, f"{levels} levels/{count} jobs"))
            slowest = min(slowest, (1 / n, f"{levels} levels/{count} jobs"))
            print(f"{levels:>6} {count:>6} {d * 1e6:>7.2f} {t * 1e6:>9.2f} {n * 1e6:>8.2f} {t / d:>8.2f}x "
                  f"{n / d:>7.2f}x {t / n:>7.2f}x  {'yes' if equal else 'NO'}", flush=True)
    met = worst[0] <= 2.0 and slowest[0] >= 100_000
    print(f"goal (issue 38): mch now within 2x of drf in every cell and >= 100,000 decisions/s (at the sizes run): "
          f"{'met' if met else 'NOT met'} (worst now/drf {worst[0]:.2f}x at {worst[1]}; "
          f"slowest {slowest[0]:,.0f} decisions/s at {slowest[1]})")
    return 0 if same else 1


def compare_mch_opcodes(args: argparse.Namespace, old: ModuleType) -> int:
    print(f"mch at {args.rev} vs now: bytecode instructions per decision in the policies' code "
          f"(deterministic; at most {args.decisions} decisions)")
    print(f"{'levels':>6} {'jobs':>6} {'drf':>6} {'mch then':>9} {'mch now':>8} {'then/drf':>9} {'now/drf':>8}  same picks")
    capacity, same = pool(), True
    for levels in (int(x) for x in args.levels.split(",")):
        tree = binary_tree(levels)
        for count in (int(x) for x in args.job_counts.split(",")):
            jobs = google_jobs(count, tree.leaves, random.Random(1))
            d, _ = opcodes(make_fairness("drf"), jobs, capacity, tree, args.decisions)
            t, p_then = opcodes(old.MchPolicy(), jobs, capacity, tree, args.decisions)
            n, p_now = opcodes(make_fairness("mch"), jobs, capacity, tree, args.decisions)
            same &= p_then == p_now
            print(f"{levels:>6} {count:>6} {d:>6.0f} {t:>9.0f} {n:>8.0f} {t / d:>8.2f}x {n / d:>7.2f}x  "
                  f"{'yes' if p_then == p_now else 'NO'}", flush=True)
    return 0 if same else 1


def burst(nodes: int, jobs: int, tasks: int) -> tuple[NodeMatrix, dict[str, Job], dict[str, list[Task]]]:
    matrix = NodeMatrix()
    for i in range(nodes):   # bench/cluster_scale.py's agents: 5 one-core tasks fit each
        matrix.upsert(f"sim-{i:05d}", Resources(5.5, 7 * GiB), {})
    per = tasks // jobs
    job_map = {f"j{i:02d}": Job(f"j{i:02d}", JobSpec(("sleep", "inf"), Resources(1, GiB), tasks=per), float(i))
               for i in range(jobs)}
    return matrix, job_map, {j: [Task(j, k) for k in range(per)] for j in job_map}


def compare_round(args: argparse.Namespace) -> int:
    old = load_old(args.rev, "scheduler/round.py", "round_then")
    print(f"one round placing {args.tasks:,} tasks of {args.jobs} jobs on {args.nodes:,} nodes, scheduler/round.py "
          f"at {args.rev} vs now; CPU seconds (thread); load average {os.getloadavg()[0]:.2f}")
    print(f"{'pair':>16} {'then s':>7} {'now s':>7} {'then/s':>9} {'now/s':>9} {'speedup':>8}  same placements")
    same = True
    for fairness, placement in (("mch", "anbf"), ("drf", "anbf"), ("mch", "first-fit")):
        results = {}
        for name, fn in (("then", old.schedule_round), ("now", schedule_round)):
            matrix, jobs, tasks = burst(args.nodes, args.jobs, args.tasks)
            start = time.thread_time()
            result = fn(jobs, tasks, matrix, make_fairness(fairness), make_placement(placement), random.Random(0))
            results[name] = (time.thread_time() - start, [(t.id, n) for t, n in result.placements])
        (t, p_then), (n, p_now) = results["then"], results["now"]
        equal = p_then == p_now
        same &= equal
        print(f"{fairness + '/' + placement:>16} {t:>7.2f} {n:>7.2f} {len(p_then) / t:>9,.0f} {len(p_now) / n:>9,.0f} "
              f"{t / n:>7.1f}x  {'yes' if equal else 'NO'}", flush=True)
    return 0 if same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["mch", "round"])
    parser.add_argument("--rev", default="e307186")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--levels", default="2,3,4,5", help="mch: queue tree levels")
    parser.add_argument("--job-counts", default="100,1000,10000", help="mch: jobs in the tree")
    parser.add_argument("--decisions", type=int, default=20000, help="mch: at most, per run")
    parser.add_argument("--opcodes", action="store_true",
                        help="mch: count bytecode instructions per decision instead of timing (load-independent)")
    args = parse_quick(parser, {"repeat": 1, "nodes": 100, "jobs": 5, "tasks": 500, "levels": "2",
                                        "job_counts": "100", "decisions": 500})
    return compare_mch(args) if args.what == "mch" else compare_round(args)


if __name__ == "__main__":
    sys.exit(main())
