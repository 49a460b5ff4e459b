"""Cancelling the head of a dependency chain (issue 36 #4): the master's own transition
(`handle(Cancel)`) on a chain of N jobs each waiting `afterok` on the one before, timed per
length, with the number of job derivations it makes. Before 81877a2 every pass of the
cascade re-derived every job the step had changed (N^2 / 2 derivations: 600 jobs blocked
the loop 20 s on a busy 2-core machine); now each job is derived when it changes.

    .venv/bin/python bench/dependency_chain.py [--lengths 300,600,1500]"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args  # noqa: E402
import tcluster.master.core.draft as draft  # noqa: E402
from tcluster.domain.model import JobSpec  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.master.core.events import Cancel, Now, Submit  # noqa: E402
from tcluster.master.core.state import MasterState, Timeouts  # noqa: E402
from tcluster.master.core.transitions import handle  # noqa: E402

TIMEOUTS = Timeouts(node_timeout_s=10, lost_timeout_s=20, start_timeout_s=30, job_retention_s=100,
                    heartbeat_interval_s=1)


def chain(length: int) -> tuple[float, int]:
    """(seconds the cancel's step took, derivations it made) for a chain of `length` jobs."""
    state = MasterState([], [], [], [], TIMEOUTS, started_mono=0.0)
    ids = [f"{i:08x}" for i in range(length)]
    for i, job_id in enumerate(ids):
        spec = JobSpec(("true",), Resources(0.1, 2**20), dependency=f"afterok:{ids[i - 1]}" if i else "")
        state.apply(handle(state, Submit(job_id, spec), Now(1000.0 + i, float(i))))
    calls, real = [0], draft.derive_job

    def counted(*args: object) -> object:
        calls[0] += 1
        return real(*args)  # type: ignore[arg-type]

    draft.derive_job = counted  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        step = handle(state, Cancel(ids[0]), Now(5000.0, 5000.0))
        seconds = time.perf_counter() - started
    finally:
        draft.derive_job = real
    assert len(step.jobs) == length, "every job of the chain ends in the one step"
    return seconds, calls[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="300,600,1500", help="chain lengths, comma-separated")
    args = parse_args(parser, {"lengths": "20,40"})
    print(f"{'jobs':>6} {'cancel step':>12} {'derivations':>12} {'per job':>8}")
    for length in (int(n) for n in args.lengths.split(",")):
        seconds, derived = chain(length)
        print(f"{length:>6} {seconds:>11.3f}s {derived:>12,} {derived / length:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
