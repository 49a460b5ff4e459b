"""`tcl sim SCENARIO.yaml`: try a queue configuration and the policies on a simulated
cluster before deploying them. Runs locally; no master is needed."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any, Callable

from tcluster.cli.options import EXIT_FAILURE, EXIT_OK
from tcluster.views.formats import format_table
from tcluster.domain.units import format_bytes, format_cpu

# The simulator pulls in numpy and the whole scheduler: import it only when `sim` runs
# (its parser is cli/main.py's), so that every other `tcl` command starts fast.


def run_sim(args: argparse.Namespace) -> int:
    from tcluster.scheduler.placement import DEFAULT_PLACEMENT
    from tcluster.sim.engine import simulate
    from tcluster.sim.report import to_json, write_plot, write_timeline
    from tcluster.sim.scenario import load_scenario

    from tcluster.sim.federation.scenario import is_federation

    federation = is_federation(args.scenario)   # a top-level `federation:`: Megha and its baselines
    if federation is not None:
        return run_federation(args, federation)
    placement = args.placement or DEFAULT_PLACEMENT
    scenario = load_scenario(args.scenario)   # InvalidArgument names the line: exit 2
    if scenario.workload is not None:
        return run_comparison(args, scenario)
    lotes = lotes_options(args, scenario) if placement == "lotes" else None
    if getattr(args, "no_backfill", False):
        scenario = replace(scenario, backfill=False)
    if getattr(args, "backfill_compare", False):
        return run_backfill_comparison(args, scenario, placement, lotes)
    if getattr(args, "preempt_compare", False):
        return run_preempt_comparison(args, scenario, placement, lotes)
    settings = preemption_settings(args, scenario)
    if settings is not None and getattr(args, "preempt_naive", False):
        settings = replace(settings, final_share_rule=False, victim_floor=False)
    run = simulate(scenario, args.fairness, placement, args.until, args.seed, lotes, settings)   # unknown policy: exit 2
    report = to_json(run, scenario, args.fairness, placement)
    if args.timeline:
        write_timeline(run, scenario, args.timeline)
    if args.plot and not _plotted(lambda: write_plot(run, scenario, args.plot, f"{args.scenario} ({args.fairness})")):
        return EXIT_FAILURE
    print(json.dumps(report, indent=2) if args.output == "json" else sim_table(report))
    return EXIT_OK


def preemption_settings(args: argparse.Namespace, scenario: Any) -> Any:
    """The scenario's knobs (tcl-master's defaults where it gives none), the flags over
    them; None when the run does not preempt."""
    from tcluster.domain.errors import InvalidArgument

    if not any(getattr(args, k, False) for k in ("preemption", "preempt_naive", "preempt_compare")):
        return None
    knobs = {"after_s": args.preempt_after_s, "grace_s": args.preempt_grace_s,
             "min_runtime_s": args.preempt_min_runtime_s, "max_per_round": args.preempt_max_per_round}
    for key, value in knobs.items():
        if value is not None and (value < (1 if key == "max_per_round" else 0)):
            flag = "--preempt-" + key.replace("_", "-")
            raise InvalidArgument(flag, f"{value!r} must be >= {1 if key == 'max_per_round' else 0}")
    return replace(scenario.preemption, **{k: v for k, v in knobs.items() if v is not None})


def run_preempt_comparison(args: argparse.Namespace, scenario: Any, placement: str, lotes: Any) -> int:
    """The same scenario and seed three times: no preemption, preemption, the naive policy."""
    from tcluster.sim.engine import simulate
    from tcluster.sim.preemption_report import comparison_table, summarize, to_json, write_share_plot

    fair = preemption_settings(args, scenario)
    systems = [("none", None), ("preemption", fair),
               ("naive", replace(fair, final_share_rule=False, victim_floor=False))]
    runs = [(name, simulate(scenario, args.fairness, placement, args.until, args.seed, lotes, settings,
                            record_queues=True)) for name, settings in systems]
    summaries = [summarize(name, run) for name, run in runs]
    if args.plot and not _plotted(lambda: write_share_plot(runs, args.plot, f"{args.scenario} ({args.fairness})")):
        return EXIT_FAILURE
    if args.output == "json":
        print(json.dumps(to_json(summaries), indent=2))
    else:
        s = fair
        print(f"after={s.after_s:g}s grace={s.grace_s:g}s min-runtime={s.min_runtime_s:g}s "
              f"max-per-round={s.max_per_round}  fairness={args.fairness}  placement={placement}  seed={args.seed}\n")
        print(comparison_table(summaries))
    return EXIT_OK


def run_backfill_comparison(args: argparse.Namespace, scenario: Any, placement: str, lotes: Any) -> int:
    """The same scenario and seed twice: backfill off, then on (sim/backfill_report.py)."""
    from tcluster.sim.backfill_report import comparison_table, summarize, to_json
    from tcluster.sim.engine import simulate

    settings = preemption_settings(args, scenario)
    summaries = [summarize(name, simulate(replace(scenario, backfill=on), args.fairness, placement, args.until,
                                          args.seed, lotes, settings)) for name, on in (("off", False), ("on", True))]
    if args.output == "json":
        print(json.dumps(to_json(summaries), indent=2))
    else:
        print(f"fairness={args.fairness}  placement={placement}  seed={args.seed}  "
              f"reserve_after_s={scenario.reserve_after_s:g}\n")
        print(comparison_table(summaries))
    return EXIT_OK


def lotes_options(args: argparse.Namespace, scenario: Any) -> Any:
    from tcluster.scheduler.lotes.classes import load_classes
    from tcluster.sim.engine import LotesOptions

    kinds = tuple(dict.fromkeys(k for n in scenario.nodes for k in n.capacity.as_dict()))
    classes = load_classes(args.lotes_classes, kinds) if args.lotes_classes else ()
    return LotesOptions(classes, args.lotes_k, args.lotes_config_label)


def run_comparison(args: argparse.Namespace, scenario: Any) -> int:
    from tcluster.domain.errors import InvalidArgument
    from tcluster.scheduler.lotes.model import LotesUnsolvable
    from tcluster.scheduler.placement import make_placement
    from tcluster.sim.compare import DEFAULT_POLICIES, compare, to_json
    from tcluster.sim.compare_report import comparison_table, parse_list, write_comparison_plot
    from tcluster.sim.queueing import base_policy

    policies = parse_list(args.compare) or ([args.placement] if args.placement else list(DEFAULT_POLICIES))
    for policy in policies:
        if policy != "greedy":
            make_placement(base_policy(policy))   # an unknown name: exit 2 with the list
    try:
        loads = parse_list(args.load, float)
    except ValueError:
        raise InvalidArgument("--load", f"{args.load!r} is not a list of numbers like 0.9,0.95") from None
    if args.seeds < 1:
        raise InvalidArgument("--seeds", "must be >= 1")
    try:
        runs, solves, timelines = compare(scenario, policies, range(args.seed, args.seed + args.seeds), loads)
    except LotesUnsolvable as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    if args.plot and not _plotted(lambda: write_comparison_plot(runs, timelines, args.plot, str(args.scenario))):
        return EXIT_FAILURE
    print(json.dumps(to_json(runs, solves), indent=2) if args.output == "json" else comparison_table(runs, solves))
    return EXIT_OK


def run_federation(args: argparse.Namespace, doc: Any) -> int:
    """Each system at each size, on one draw of nodes and arrivals per size."""
    from tcluster.domain.errors import InvalidArgument
    from tcluster.sim.federation.compare import SYSTEMS, compare
    from tcluster.sim.compare_report import parse_list
    from tcluster.sim.federation.scenario import federation_json, federation_table, parse_federation, write_cdf_plot

    scenario = parse_federation(doc)
    systems = parse_list(args.compare) or list(scenario.systems)
    for name in systems:
        if name not in SYSTEMS:
            raise InvalidArgument("--compare", f"{name!r} is not a federation system; allowed: {', '.join(SYSTEMS)}")
    results = [r for size in scenario.sizes
               for r in compare(replace(scenario.config, workers=size), scenario.spec_for(size), systems,
                                 scenario.probes, scenario.measured)]
    if args.plot and not _plotted(lambda: write_cdf_plot(results, args.plot, f"{args.scenario}: allocation time CDF")):
        return EXIT_FAILURE
    print(json.dumps(federation_json(scenario, results), indent=2) if args.output == "json"
          else federation_table(scenario, results))
    return EXIT_OK


def _time(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def sim_table(report: dict[str, Any]) -> str:
    m = report["metrics"]
    head = (f"t={m['time']:g}s  fairness={m['fairness']}  placement={m['placement']}  events={m['events']}  "
            f"rounds={m['rounds']}  placed={m['tasks_placed']}  done={m['tasks_done']}")
    if "preemptions" in m:   # --preemption / --preempt-naive
        head += f"  preemptions={m['preemptions']}  requeued={m['tasks_requeued']}"
    if "jobs_cancelled" in m:   # a scenario with batch work
        head += f"  failed={m['tasks_failed']}  cancelled={m['jobs_cancelled']}"
    weights = m["flattened_weights"]
    jobs = format_table(
        ("JOB", "QUEUE", "TASKS", "RUNNING", "DONE", "SHARE", "MCH WEIGHT", "STATE", "STARTED", "ENDED"),
        [(j["name"], j["queue"], j.get("array") or str(j["tasks_total"]), str(j["tasks_running"]),
          str(j["tasks_done"]), f"{j['dominant_share']:.3f}",
          f"{weights[j['name']]:.3g}" if j["name"] in weights else "-", j["state"], _time(j["started"]),
          _time(j["ended"])) for j in report["jobs"]],
    )
    why = [f"{j['name']}: {j['reason']}" for j in report["jobs"] if j["reason"]]
    if why:   # cancelled jobs, and those still waiting for a dependency
        jobs += "\n\n" + "\n".join(why)
    gpus = any(n["capacity"].get("gpu") for n in report["nodes"])     # GPU columns where a node has GPUs
    nodes = format_table(
        ("NODE", "CPU", "MEM", "FREE CPU", "FREE MEM") + (("GPU", "FREE GPU") if gpus else ()),
        [(n["name"], format_cpu(n["capacity"]["cpu"]), format_bytes(n["capacity"]["memory"]),
          format_cpu(n["free"]["cpu"]), format_bytes(n["free"]["memory"]))
         + ((f"{n['capacity'].get('gpu', 0):g}", f"{n['free'].get('gpu', 0):g}") if gpus else ())
         for n in report["nodes"]],
    )
    return f"{head}\n\n{jobs}\n\n{nodes}"


def _plotted(draw: Callable[[], object]) -> bool:
    """Draws a --plot; False, having said why, when matplotlib is missing or the drawing fails."""
    try:
        draw()
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    return True
