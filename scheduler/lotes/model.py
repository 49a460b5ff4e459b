"""The values LoTES works on (Tran et al., J. Scheduling 2018, sections 2 and 4).

A Problem is what the offline stages need: machine configurations (identical machines,
counted), job classes (mean request, arrival share, speed per configuration) and the
resource kinds. Everything is normalized by the largest capacity of each kind, as the
paper does (section 5.3.1), so the LPs stay well scaled whatever the units."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import numpy.typing as npt


class LotesUnsolvable(Exception):
    """The offline stages found no usable plan; the policy falls back to anbf."""


@dataclass(frozen=True)
class Configuration:
    name: str
    capacity: tuple[float, ...]      # one machine, in the problem's kinds and units
    count: int
    nodes: tuple[str, ...] = ()      # the machines, in name order (empty in offline studies)


@dataclass(frozen=True)
class JobClass:
    name: str
    request: tuple[float, ...]       # mean request per kind, same units as capacities
    share: float                     # alpha_k: the fraction of arrivals in this class
    speed: Mapping[str, float] = field(default_factory=dict)   # mu_jk by configuration name; default 1


@dataclass(frozen=True)
class Problem:
    kinds: tuple[str, ...]
    configurations: tuple[Configuration, ...]
    classes: tuple[JobClass, ...]
    fit_fix: bool = True             # False: paper-literal, a class may be allocated where it cannot fit
    bin_cap: int = 200_000

    def scale(self) -> npt.NDArray[np.float64]:
        largest = np.max(np.array([c.capacity for c in self.configurations], dtype=float), axis=0)
        return np.where(largest > 0, largest, 1.0)

    def capacities(self) -> npt.NDArray[np.float64]:
        """c_jl, normalized: (J, L)."""
        return np.array([c.capacity for c in self.configurations], dtype=float) / self.scale()

    def counts(self) -> npt.NDArray[np.float64]:
        return np.array([c.count for c in self.configurations], dtype=float)

    def requests(self) -> npt.NDArray[np.float64]:
        """r_kl, normalized: (K, L)."""
        return np.array([k.request for k in self.classes], dtype=float) / self.scale()

    def shares(self) -> npt.NDArray[np.float64]:
        alpha = np.array([k.share for k in self.classes], dtype=float)
        return alpha / float(alpha.sum())

    def speeds(self) -> npt.NDArray[np.float64]:
        """mu_jk: (J, K); 0 means the class cannot run there."""
        return np.array([[float(k.speed.get(c.name, 1.0)) for k in self.classes] for c in self.configurations],
                        dtype=float)

    def fits(self) -> npt.NDArray[np.bool_]:
        """(J, K) bool: one job of the class's mean size fits one machine of the configuration."""
        below = self.requests()[None, :, :] <= self.capacities()[:, None, :] + 1e-12
        fit: npt.NDArray[np.bool_] = np.all(below, axis=2)
        return fit


@dataclass(frozen=True)
class Plan:
    """Stages 1 and 2 solved: what stage 3 dispatches by."""
    problem: Problem
    lambda1: float                   # stage 1 optimum: the fluid throughput bound
    lambda2_lp: float                # stage 2 LP optimum (fractional machines)
    lambda2: float                   # after rounding to whole machines: the load reference
    support: tuple[tuple[int, ...], ...]     # K^j per configuration
    bins: tuple[np.ndarray, ...]     # per configuration, (bins, K) counts N_ijk
    machines: tuple[np.ndarray, ...]         # per configuration, whole machines per bin (sums to n_j)
    per_config: np.ndarray           # (J, K): Ncfg_jk = sum_i N_ijk x_ij, class-k jobs a configuration targets
    routing: np.ndarray              # (J, K): rho_jk = Ncfg_jk / sum_m Ncfg_mk (0 where the class has none)
    notes: tuple[str, ...] = ()      # what an operator should know: caps hit, repairs made

    def node_targets(self) -> dict[str, tuple[int, np.ndarray]]:
        """Machine -> (configuration, its bin's counts): the first x_1j machines of j in name
        order emulate bin 1, the next ones bin 2, and so on (any mapping is equivalent)."""
        targets: dict[str, tuple[int, np.ndarray]] = {}
        for j, config in enumerate(self.problem.configurations):
            per_machine = np.repeat(np.arange(len(self.machines[j])), self.machines[j])
            for name, b in zip(config.nodes, per_machine):
                targets[name] = (j, self.bins[j][b])
        return targets
