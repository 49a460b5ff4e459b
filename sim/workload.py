"""Generated workloads for `tcl sim`: arrival processes over job classes (Tran et al.,
section 5.4), instead of a fixed job list.

    workload:
      horizon: 10               # time units (the unit of 1/speed; hours in the paper)
      load: [0.90, 0.95]        # rho relative to LoTES's stage-2 LP optimum lambda* (before rounding)
      # rate: 5000              # or: total arrivals per time unit (Poisson)
      work_mean: 1.0            # each task's work w ~ Exp(mean); its duration is w / speed(class, config)
      cv: 0.5                   # actual request per resource: Gaussian around the class mean, truncated to [0, largest node]
      classes:                  # explicit classes ...
        - {name: a, request: {cpu: 2, memory: 4Gi}, share: 0.5, speed: {c01: 2.0}}
      generate: {classes: 9, phi: 0.015, omega: 0.3, base: 0.025}   # ... or the paper's generator

The load is relative to the stage-2 LP optimum before rounding: at a few machines per
configuration the rounding loses up to a quarter of it (the paper's <0.001% holds at
1,000 per configuration), and the rounded value would understate what the cluster serves.

`generate` draws, per seed, r_kl = base + U[-phi, phi] as a fraction of the largest node,
u_k ~ U[0, 1], omega_jk ~ U[1 - omega, 1 + omega] and speed mu_jk = omega_jk / u_k (the
paper's section 5.4.3 prints u_k omega_jk, inconsistent with its 1/u_k of 5.4.2). Classes
arrive in equal shares. Configurations are named c01, c02, ... in Table 1 order (most
machines first), or by the node label given as `config_label`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from tcluster.scheduler.lotes.model import Configuration, JobClass
from tcluster.scheduler.lotes.classes import _parse_class
from tcluster.scheduler.yamlsrc import Located, Path

_KEYS = ("horizon", "load", "rate", "work_mean", "cv", "classes", "generate", "config_label", "fit_fix")
_GENERATE_KEYS = ("classes", "phi", "omega", "base")


@dataclass(frozen=True)
class Generator:
    classes: int
    phi: float
    omega: float
    base: float


@dataclass(frozen=True)
class Workload:
    horizon: float
    loads: tuple[float, ...]          # empty when `rate` is given
    rate: float | None
    work_mean: float = 1.0
    cv: float = 0.5
    classes: tuple[JobClass, ...] = ()
    generate: Generator | None = None
    config_label: str | None = None
    fit_fix: bool = True

    def instance(self, configurations: tuple[Configuration, ...], scale: np.ndarray, seed: int) -> tuple[JobClass, ...]:
        """The classes of one run: the explicit ones, or a fresh draw of the generator."""
        if self.generate is None:
            return self.classes
        g, rng = self.generate, random.Random(f"classes-{seed}")
        classes = []
        for k in range(g.classes):
            request = tuple(float((g.base + rng.uniform(-g.phi, g.phi)) * s) for s in scale)
            u = rng.uniform(0.05, 1.0)   # u_k ~ U[0, 1]; bounded away from 0 so no class is infinitely fast
            speed = {c.name: rng.uniform(1 - g.omega, 1 + g.omega) / u for c in configurations}
            classes.append(JobClass(f"k{k + 1}", request, 1.0 / g.classes, speed))
        return tuple(classes)


def parse_workload(doc: Located, kinds: tuple[str, ...]) -> Workload:
    path: Path = ("workload",)
    body = doc.value["workload"]
    if not isinstance(body, dict):
        raise doc.error(path, f"must be a mapping with {', '.join(_KEYS)}")
    for key in body:
        if key not in _KEYS:
            raise doc.error((*path, key), f"unknown key; a workload has {', '.join(_KEYS)}")
    if ("load" in body) == ("rate" in body):
        raise doc.error(path, "give exactly one of `load` (relative to lambda*) or `rate` (arrivals per time unit)")
    if ("classes" in body) == ("generate" in body):
        raise doc.error(path, "give exactly one of `classes` or `generate`")
    loads = body.get("load", [])
    loads = [loads] if not isinstance(loads, list) else loads
    return Workload(
        _number(doc, (*path, "horizon"), body.get("horizon"), strict=True),
        tuple(_number(doc, (*path, "load", i), v, strict=True) for i, v in enumerate(loads)),
        None if "rate" not in body else _number(doc, (*path, "rate"), body["rate"], strict=True),
        _number(doc, (*path, "work_mean"), body.get("work_mean", 1.0), strict=True),
        _number(doc, (*path, "cv"), body.get("cv", 0.5)),
        _classes(doc, path, body.get("classes"), kinds),
        _generator(doc, (*path, "generate"), body.get("generate")),
        None if body.get("config_label") is None else str(body["config_label"]),
        bool(body.get("fit_fix", True)),
    )


def _classes(doc: Located, path: Path, raw: Any, kinds: tuple[str, ...]) -> tuple[JobClass, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise doc.error((*path, "classes"), "must be a non-empty list of {name, request, share, speed}")
    return tuple(_parse_class(doc, (*path, "classes", i), body, kinds) for i, body in enumerate(raw))


def _generator(doc: Located, path: Path, raw: Any) -> Generator | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise doc.error(path, f"must be a mapping with {', '.join(_GENERATE_KEYS)}")
    for key in raw:
        if key not in _GENERATE_KEYS:
            raise doc.error((*path, key), f"unknown key; allowed: {', '.join(_GENERATE_KEYS)}")
    count = raw.get("classes", 9)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise doc.error((*path, "classes"), f"{count!r} must be a whole number >= 1")
    phi, base = _number(doc, (*path, "phi"), raw.get("phi", 0.0)), _number(doc, (*path, "base"), raw.get("base", 0.025), strict=True)
    if phi >= base:
        raise doc.error((*path, "phi"), f"{phi:g} must be below base {base:g} (requests would reach zero)")
    omega = _number(doc, (*path, "omega"), raw.get("omega", 0.0))
    if omega >= 1:
        raise doc.error((*path, "omega"), f"{omega:g} must be below 1 (speeds would reach zero)")
    return Generator(count, phi, omega, base)


def _number(doc: Located, path: Path, value: Any, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise doc.error(path, f"{value!r} is not a number")
    if value < 0 or (strict and value == 0):
        raise doc.error(path, f"{value!r} must be {'>' if strict else '>='} 0")
    return float(value)
