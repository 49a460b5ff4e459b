"""What `tcl sim` prints for a generated workload: one row per (load, policy) with the
response time averaged over seeds and its range, then per-seed means side by side, and
the plot (mean response by load; queue length over time for the first seed)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from tcluster.views.formats import format_table
from tcluster.sim.compare import RunSummary, SolveInfo
from tcluster.sim.queueing import QueueRun


def _fmt(x: float) -> str:
    return f"{x:.4f}" if x < 100 else f"{x:.1f}"


def comparison_table(runs: list[RunSummary], solves: list[SolveInfo], unit: str = "h") -> str:
    groups: dict[tuple[float | None, str], list[RunSummary]] = defaultdict(list)
    for r in runs:
        groups[(r.load, r.policy)].append(r)
    rows = []
    for (load, policy), rs in groups.items():
        means = [r.mean_response for r in rs]
        rows.append((
            "-" if load is None else f"{load:.2f}", policy, _fmt(statistics.mean(means)),
            f"{_fmt(min(means))}-{_fmt(max(means))}", _fmt(statistics.mean(r.p50_response for r in rs)),
            _fmt(statistics.mean(r.p99_response for r in rs)), f"{statistics.mean(r.waited_fraction for r in rs):.1%}",
            f"{statistics.mean(r.mean_queue for r in rs):.1f}", _fmt(statistics.mean(r.mean_completion for r in rs)),
            str(sum(r.unstarted for r in rs)), "yes" if any(r.unstable for r in rs) else "no",
        ))
    seeds = sorted({r.seed for r in runs})
    head = (f"response time = arrival to start ({unit}); mean over {len(seeds)} seeds "
            f"({', '.join(map(str, seeds))}), range = min-max of the per-seed means")
    table = format_table(("LOAD", "POLICY", "MEAN", "RANGE", "P50", "P99", "WAITED", "QUEUE", "COMPLETION",
                          "UNSTARTED", "UNSTABLE"), rows)
    return "\n\n".join([head, table, per_seed_table(runs), solve_table(solves)])


def per_seed_table(runs: list[RunSummary]) -> str:
    policies = list(dict.fromkeys(r.policy for r in runs))
    by_key = {(r.load, r.seed, r.policy): r for r in runs}
    keys = list(dict.fromkeys((r.load, r.seed) for r in runs))
    rows = []
    for load, seed in keys:
        means = [by_key[(load, seed, p)].mean_response for p in policies]
        ranked = sorted(means)
        # Within 5% (or 0.0001 time units) of the runner-up is a tie: noise, not an ordering.
        close = len(ranked) > 1 and ranked[1] - ranked[0] <= max(1e-4, 0.05 * ranked[1])
        best = "tie" if close else policies[means.index(ranked[0])]
        rows.append(("-" if load is None else f"{load:.2f}", str(seed), *map(_fmt, means), best))
    return format_table(("LOAD", "SEED", *(f"{p} mean" for p in policies), "BEST"), rows)


def solve_table(solves: list[SolveInfo]) -> str:
    if not solves:
        return "LoTES: no plan (the policy ran as anbf)"
    rows = [(str(s.seed), f"{s.lambda1:,.1f}", f"{s.lambda2_lp:,.1f}", f"{s.lambda2:,.1f}", str(s.bins),
             f"{s.solve_s:.2f}s", "; ".join(s.notes) or "-") for s in solves]
    return format_table(("SEED", "LAMBDA1*", "LAMBDA2* LP", "LAMBDA2* ROUNDED", "BINS", "SOLVE", "NOTES"), rows)


def write_comparison_plot(runs: list[RunSummary], timelines: dict[str, QueueRun], path: Path | str,
                          title: str) -> None:
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError("--plot needs matplotlib: pip install 'tcluster[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r.policy for r in runs))
    loads = sorted({r.load for r in runs if r.load is not None}) or [None]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        means = [[r.mean_response for r in runs if r.policy == policy and r.load == load] for load in loads]
        centre = [statistics.mean(m) for m in means]
        low = [c - min(m) for c, m in zip(centre, means)]
        high = [max(m) - c for c, m in zip(centre, means)]
        xs = [x + i * width for x in range(len(loads))]
        left.bar(xs, centre, width, yerr=[low, high], capsize=3, label=policy)
    left.set_xticks([x + width * (len(policies) - 1) / 2 for x in range(len(loads))],
                    ["-" if load is None else f"{load:.2f}" for load in loads])
    left.set_xlabel("load (of lambda*)")
    left.set_ylabel("mean response time (arrival to start)")
    left.legend(fontsize="small")
    for policy, run in timelines.items():
        right.step([t for t, _ in run.queue], [q for _, q in run.queue], where="post", label=policy)
    right.set_xlabel("time")
    right.set_ylabel("tasks waiting (first seed, highest load)")
    right.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def parse_list(text: str | None, convert=str) -> Sequence:  # type: ignore[no-untyped-def]
    return [convert(part.strip()) for part in text.split(",") if part.strip()] if text else []
