"""`tcl sim` for a federation scenario: Megha (issue 25) against centralized Megha and the
Sparrow batch sampler, on the federation's synthetic workload (sim/federation/workload.py).

    federation:
      workers: 10000            # or a list, one run per size: [1000, 5000, 10000]
      lms: 10
      gms: 10
      queues_per_gm: 1
      heartbeat_s: 10           # LM -> GM full state period
      repartition: true
      preemption: false         # Alg. 2 with equal shares over all queues
      net_base_s: 0.0005        # one-way message delay (Sparrow's probe delay)
      systems: [megha, centralized, sparrow]
      sparrow_probes: 2
      handler_times: measured   # or constant (the default: FedConfig's, deterministic)
      seed: 1
      workload: {tasks: 100000, load: 0.9, mean_duration_s: 10, constrained: 0.5}

Every key but `workers` is optional (the defaults above, FedConfig's and WorkloadSpec's).
`workload.tasks_per_worker` instead of `tasks` scales the task count with each size:
a fixed count cannot offer `load` of a large federation's cores (busy cores are at most
tasks x cores per task), and the arrival rate that tries turns into one burst.
Every error names the line and the key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path as FsPath
from typing import Any

from tcluster.views.formats import format_table
from tcluster.scheduler.yamlsrc import Located, Path, load_located, read_config_file
from tcluster.sim.federation.compare import COMPONENTS, SYSTEMS, SystemResult
from tcluster.sim.federation.sim import FedConfig
from tcluster.sim.federation.workload import WorkloadSpec
from tcluster.sim.scenario import checked_mapping

_KEYS = {"workers": int, "lms": int, "gms": int, "queues_per_gm": int, "heartbeat_s": float,
         "repartition": bool, "preemption": bool, "net_base_s": float, "systems": list,
         "sparrow_probes": int, "seed": int, "workload": dict, "handler_times": str}
HANDLER_TIMES = ("constant", "measured")
_WORKLOAD_KEYS = {"tasks": int, "tasks_per_worker": float, "load": float, "mean_duration_s": float, "constrained": float,
                  "n_constraints": int}


@dataclass(frozen=True)
class FederationScenario:
    source: str
    sizes: tuple[int, ...]
    config: FedConfig                 # workers: the first size
    workload: WorkloadSpec
    systems: tuple[str, ...]
    probes: int
    tasks_per_worker: float | None = None
    measured: bool = False            # handler_times: measured (sim/federation/calibrate.py)

    def spec_for(self, workers: int) -> WorkloadSpec:
        if self.tasks_per_worker is None:
            return self.workload
        return replace(self.workload, tasks=max(1, round(self.tasks_per_worker * workers)))


def is_federation(path: FsPath | str) -> Located | None:
    """The parsed file when it is a federation scenario (a top-level `federation:`)."""
    doc = load_located(read_config_file(path, "the scenario"), str(path))
    return doc if isinstance(doc.value, dict) and "federation" in doc.value else None


def parse_federation(doc: Located) -> FederationScenario:
    for key in doc.value:
        if key != "federation":
            raise doc.error((key,), "unknown key; a federation scenario has only `federation`")
    body = checked_mapping(doc, ("federation",), doc.value["federation"], _KEYS)
    sizes = _sizes(doc, body.get("workers"))
    knobs = {k: _value(doc, ("federation", k), body[k], _KEYS[k]) for k in body
             if k not in ("workers", "systems", "sparrow_probes", "workload", "handler_times")}
    for k in ("lms", "gms", "queues_per_gm"):
        if k in knobs and knobs[k] < 1:
            raise doc.error(("federation", k), f"{knobs[k]!r} must be >= 1")
    for k in ("heartbeat_s", "net_base_s"):
        if k in knobs and knobs[k] <= 0:
            raise doc.error(("federation", k), f"{knobs[k]!r} must be > 0")
    config = FedConfig(workers=sizes[0], **knobs)
    if any(w < config.lms for w in sizes):
        raise doc.error(("federation", "workers"), f"every size must be >= lms ({config.lms})")
    systems = tuple(body.get("systems", SYSTEMS))
    for i, name in enumerate(systems):
        if name not in SYSTEMS:
            raise doc.error(("federation", "systems", i), f"{name!r} is not a system; allowed: {', '.join(SYSTEMS)}")
    probes = _value(doc, ("federation", "sparrow_probes"), body.get("sparrow_probes", 2), int)
    if probes < 1:
        raise doc.error(("federation", "sparrow_probes"), f"{probes!r} must be >= 1")
    spec, per_worker = _workload(doc, body.get("workload", {}))
    handlers = _value(doc, ("federation", "handler_times"), body.get("handler_times", "constant"), str)
    if handlers not in HANDLER_TIMES:
        raise doc.error(("federation", "handler_times"), f"{handlers[:40]!r}: allowed {', '.join(HANDLER_TIMES)}")
    return FederationScenario(doc.source, sizes, config, spec, systems, probes, per_worker, handlers == "measured")


def _value(doc: Located, path: Path, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise doc.error(path, f"{value!r} is not a whole number")
    if not isinstance(value, kind):
        raise doc.error(path, f"{value!r} must be a {'list' if kind is list else kind.__name__}")
    return value


def _sizes(doc: Located, value: Any) -> tuple[int, ...]:
    path: Path = ("federation", "workers")
    raw = value if isinstance(value, list) else [value]
    if value is None or not raw:
        raise doc.error(path, "give the number of workers, or a list of sizes like [1000, 10000]")
    sizes = tuple(_value(doc, path, w, int) for w in raw)
    if any(w < 1 for w in sizes):
        raise doc.error(path, "every size must be >= 1")
    return sizes


def _workload(doc: Located, value: Any) -> tuple[WorkloadSpec, float | None]:
    path: Path = ("federation", "workload")
    body = checked_mapping(doc, path, value, _WORKLOAD_KEYS)
    spec = {k: _value(doc, (*path, k), v, _WORKLOAD_KEYS[k]) for k, v in body.items()}
    if "tasks" in spec and "tasks_per_worker" in spec:
        raise doc.error((*path, "tasks_per_worker"), "give `tasks` or `tasks_per_worker`, not both")
    per_worker = spec.pop("tasks_per_worker", None)
    if per_worker is not None and per_worker <= 0:
        raise doc.error((*path, "tasks_per_worker"), f"{per_worker!r} must be > 0")
    for k, low in (("tasks", 1), ("load", 1e-9), ("mean_duration_s", 1e-9), ("constrained", 0), ("n_constraints", 0)):
        if k in spec and spec[k] < low:
            raise doc.error((*path, k), f"{spec[k]!r} must be {'>' if low == 1e-9 else '>='} {0 if low == 1e-9 else low}")
    if spec.get("constrained", 0) > 1:
        raise doc.error((*path, "constrained"), f"{spec['constrained']!r} is a share: 0 to 1")
    return WorkloadSpec(**spec), per_worker


# ---- output ----

def _ms(x: float) -> str:
    return f"{x:.2f}" if x < 1000 else f"{x:,.0f}"


def federation_table(scenario: FederationScenario, results: list[SystemResult]) -> str:
    cfg, spec = scenario.config, scenario.workload
    count = f"{scenario.tasks_per_worker:g} tasks per worker" if scenario.tasks_per_worker else f"{spec.tasks} tasks"
    head = (f"{scenario.source}: {count} (load {spec.load:.0%}, mean duration {spec.mean_duration_s:g} s, "
            f"{spec.constrained:.0%} constrained), heartbeat {cfg.heartbeat_s:g} s, seed {cfg.seed}; "
            "allocation time in ms")
    main = format_table(
        ("SYSTEM", "WORKERS", "PLACED", "PEAK BUSY", "P50", "P99", "MAX", "INCONSIST/1K", "REPART/1K"),
        [(r.system, str(r.workers), f"{r.placed}/{r.tasks}", f"{r.peak_busy:.1%}", *map(_ms, r.alloc_ms),
          f"{r.per_1000.get('inconsistencies', 0.0):.2f}", f"{r.per_1000.get('repartitions', 0.0):.2f}")
         for r in results])
    parts = format_table(
        ("SYSTEM", "WORKERS", "COMPONENT", "P50", "P99", "MAX", "SHARE"),
        [(r.system, str(r.workers), c, *map(_ms, r.parts_ms[c]), f"{r.shares[c]:.1%}")
         for r in results for c in COMPONENTS])
    handlers = "\n".join(f"{r.system} at {r.workers} workers: {r.handlers}" for r in results if r.handlers)
    return "\n\n".join([head, main, parts, handlers] if handlers else [head, main, parts])


def federation_json(scenario: FederationScenario, results: list[SystemResult]) -> dict[str, Any]:
    drop = {"alloc_s"}
    return {
        "scenario": scenario.source, "sizes": list(scenario.sizes), "config": asdict(scenario.config),
        "workload": asdict(scenario.workload), "sparrow_probes": scenario.probes,
        "tasks_per_worker": scenario.tasks_per_worker,
        "results": [{f.name: getattr(r, f.name) for f in fields(r) if f.name not in drop} for r in results],
    }


def write_cdf_plot(results: list[SystemResult], path: FsPath | str, title: str) -> None:
    """One panel per size: the CDF of every system's allocation time (log time axis)."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError("--plot needs matplotlib: pip install 'tcluster[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes = list(dict.fromkeys(r.workers for r in results))
    figure, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.5), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for r in (r for r in results if r.workers == size):
            ms = np.sort(np.array(r.alloc_s)) * 1e3
            ax.step(ms, np.arange(1, ms.size + 1) / max(ms.size, 1), where="post", label=r.system)
        ax.set_xscale("log")
        ax.set_xlabel("allocation time (ms)")
        ax.set_ylabel("fraction of tasks")
        ax.set_title(f"{size} workers")
        ax.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
