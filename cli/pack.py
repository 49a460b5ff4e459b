"""`tcl pack`: how well a placement policy packs a workload, measured the way Verma,
Korupolu and Wilkes do (utilization, hole filling, workload inflation, cluster compaction).
Two independent axes: the job order (`--order`, the paper's) and the placement policy
(`--placement`, the master's). Runs locally; `--from-master` only reads the cluster."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tcluster.cli.options import EXIT_FAILURE, EXIT_OK, PACK_ORDERS
from tcluster.views.formats import format_table
from tcluster.domain.errors import InvalidArgument


def run_pack(args: argparse.Namespace) -> int:
    from tcluster.pack.study import METRICS, Settings, study
    from tcluster.scheduler.placement import PLACEMENT_POLICIES, make_placement

    policies = [p.strip() for p in args.placement.split(",") if p.strip()] if args.placement else sorted(PLACEMENT_POLICIES)
    for policy in policies:
        make_placement(policy)   # unknown: InvalidArgument, exit 2
    if args.order not in PACK_ORDERS:
        raise InvalidArgument("--order", f"{args.order!r}; choose one of: {', '.join(PACK_ORDERS)}")
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if unknown := [m for m in metrics if m not in METRICS]:
        raise InvalidArgument("--metrics", f"unknown {', '.join(unknown)}; choose from: {', '.join(METRICS)}")
    if not 0 <= args.tau < 1 or args.trials < 1:
        raise InvalidArgument("--tau/--trials", "tau must be in [0, 1) and trials >= 1")
    machines, jobs = load_input(args)
    settings = Settings(args.order, args.tau, args.trials, 1, args.seed, metrics=metrics)
    results = [study(machines, jobs, policy, settings) for policy in policies]
    if args.plot:
        try:
            write_pack_plot(results, args.plot)
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_FAILURE
    print(json.dumps({"results": results}, indent=2) if args.output == "json" else pack_table(results))
    return EXIT_OK


def load_input(args: argparse.Namespace) -> tuple[list, list]:
    from tcluster.pack.generate import cluster, workload
    from tcluster.pack.inputs import from_scenario

    given = [bool(args.scenario), args.from_master, args.generate is not None]
    if sum(given) != 1:
        raise InvalidArgument("input", "give exactly one of SCENARIO.yaml, --from-master or --generate MACHINES")
    if args.scenario:
        return from_scenario(args.scenario)
    if args.from_master:
        return from_master(args.master)   # a gRPC error is reported by `tcl` (exit 1)
    if args.generate < 1:
        raise InvalidArgument("--generate", "must be >= 1 machines")
    return cluster(args.generate, args.seed), workload(args.generate, args.load, args.seed)


def from_master(master: str) -> tuple[list, list]:
    """Read-only: ListNodes, and List of the pending and running jobs (their unfinished tasks)."""
    from tcluster.cli.client import MasterClient, check_master_list
    from tcluster.pack.inputs import from_snapshot
    from tcluster.v1 import common_pb2, jobs_pb2
    from tcluster.wire.protobuf import resources_from_pb

    live = {common_pb2.TASK_PENDING, common_pb2.TASK_STARTING, common_pb2.TASK_RUNNING}
    with MasterClient(check_master_list(master)) as client:
        nodes = [(n.name, resources_from_pb(n.capacity), dict(n.labels)) for n in client.list_nodes()]
        listed = client.list_jobs([jobs_pb2.JOB_PENDING, jobs_pb2.JOB_RUNNING], "", 0)
    jobs = [(j.spec.name or j.id, sum(t.state in live for t in j.tasks) if j.tasks else j.spec.tasks,
             resources_from_pb(j.spec.resources), tuple(j.spec.constraints)) for j in listed]
    jobs.reverse()   # the master lists newest first; the arrival order is oldest first
    if not nodes:
        raise InvalidArgument("--from-master", "the master has no nodes")
    return from_snapshot(nodes, jobs)


def _kinds(values: dict[str, Any], kinds: tuple[str, ...]) -> str:
    return "/".join(f"{values[k]:.3f}" if k in values else "-" for k in kinds)


def pack_table(results: list[dict[str, Any]]) -> str:
    kinds = ("cpu", "memory", "gpu") if any("gpu" in r["utilization"] for r in results) else ("cpu", "memory")
    rows = []
    for r in results:
        holes = {h["unit"]: h for h in r.get("hole_filling", [])}
        inflation = r.get("inflation", {})
        c = r.get("compaction")
        rows.append((
            r["policy"], r["order"], str(r["pending"]),
            _kinds(r["utilization"], kinds),
            *(_kinds(holes[u], kinds) if u in holes else "-" for u in (0.05, 0.25, 0.5)),
            *(f"{inflation[k]['factor']:.2f}" if k in inflation else "-"
              for k in ("horizontal_all", "horizontal_conforming", "vertical_conforming")),
            f"{r['monte_carlo']['utilization']['cpu']:.3f}" if "monte_carlo" in r else "-",
            f"{c['p90']:.3f} ({c['min']:.3f}-{c['max']:.3f})" if c and c["p90"] is not None else ("n/a" if c else "-"),
        ))
    head = (f"{results[0]['machines']} machines, {results[0]['tasks']} tasks; "
            f"utilization and hole filling are {'/'.join(kinds)}; "
            "inflation is the largest factor with pending <= tau; compaction is the p90 (min-max) fraction of machines")
    table = format_table(("POLICY", "ORDER", "PENDING", "UTIL", "HOLES 5%", "HOLES 25%", "HOLES 50%",
                          "H-ALL", "H-CONF", "V-CONF", "MC CPU", "COMPACTION"), rows)
    notes = [f"{r['policy']}: {r['note']}" for r in results if r.get("note")]
    return "\n\n".join([head, table, *notes])


def write_pack_plot(results: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError("--plot needs matplotlib: pip install 'tcluster[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (holes, pending) = plt.subplots(1, 2, figsize=(11, 4.5))
    for r in results:
        if "hole_filling" in r:
            holes.plot([h["unit"] for h in r["hole_filling"]], [h["cpu"] for h in r["hole_filling"]], marker=".",
                       label=r["policy"])
        curve = r.get("inflation", {}).get("horizontal_conforming", {}).get("curve", [])
        if curve:
            pending.plot([c["f"] for c in curve], [c["pending"] for c in curve], marker=".", label=r["policy"])
    holes.set_xlabel("unit (fraction of the median machine)")
    holes.set_ylabel("cpu utilization with holes filled")
    pending.set_xlabel("horizontal inflation factor f (conforming jobs)")
    pending.set_ylabel("pending task fraction")
    for axes in (holes, pending):
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
