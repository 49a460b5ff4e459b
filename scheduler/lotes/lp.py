"""Stages 1 and 2 of LoTES as linear programs, solved with HiGHS (scipy.optimize.linprog).

The layouts are fixed (variable order, reference resource, rows) because the allocation LP
is degenerate: its optimum lambda*_1 is unique but delta* is not, and another vertex gives
other K^j sets and other bins. Pinning the layout makes runs reproducible."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from tcluster.scheduler.lotes.bins import nondominated_bins
from tcluster.scheduler.lotes.model import LotesUnsolvable, Plan, Problem

SUPPORT_TOLERANCE = 1e-9   # HiGHS returns -0.0 and 1e-15 for "zero"


@dataclass(frozen=True)
class Allocation:
    value: float             # lambda*_1
    delta: np.ndarray        # (J, K, L)
    support: tuple[tuple[int, ...], ...]


def solve_allocation(problem: Problem) -> Allocation:
    """Eqs. (1)-(5). z = [delta_(j,k,l) at (j*K + k)*L + l ..., lambda]."""
    c, n, r = problem.capacities(), problem.counts(), problem.requests()
    alpha, mu = problem.shares(), problem.speeds()
    J, K, L = len(c), len(r), int(c.shape[1])
    def idx(j: int, k: int, l: int) -> int:   # noqa: E741
        return (j * K + k) * L + l
    lam = J * K * L
    rows: list[np.ndarray] = []
    b_ub: list[float] = []
    for k in range(K):                      # (2): alpha_k r_kl lambda - sum_j delta c n mu <= 0
        for l in range(L):
            if r[k, l] > 0:
                row = np.zeros(lam + 1)
                for j in range(J):
                    row[idx(j, k, l)] = -c[j, l] * n[j] * mu[j, k]
                row[lam] = alpha[k] * r[k, l]
                rows.append(row)
                b_ub.append(0.0)
    for j in range(J):                      # (4): sum_k delta_jkl <= 1
        for l in range(L):
            row = np.zeros(lam + 1)
            row[[idx(j, k, l) for k in range(K)]] = 1.0
            rows.append(row)
            b_ub.append(1.0)
    eq = _profile_rows(c, r, idx, lam)
    fits = problem.fits()
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * (lam + 1)
    for j in range(J):
        for k in range(K):
            if mu[j, k] <= 0 or (problem.fit_fix and not fits[j, k]):
                for l in range(L):
                    bounds[idx(j, k, l)] = (0.0, 0.0)
    objective = np.zeros(lam + 1)
    objective[lam] = -1.0
    res = linprog(objective, A_ub=np.array(rows), b_ub=b_ub, A_eq=eq if len(eq) else None,
                  b_eq=np.zeros(len(eq)) if len(eq) else None, bounds=bounds, method="highs")
    if res.status != 0:
        raise LotesUnsolvable(f"stage 1 (allocation LP): {res.message}")
    delta = res.x[:lam].reshape(J, K, L)
    ref = np.argmax(r, axis=1)
    support = tuple(tuple(k for k in range(K) if delta[j, k, ref[k]] > SUPPORT_TOLERANCE) for j in range(J))
    return Allocation(float(-res.fun), delta, support)


def _profile_rows(c: np.ndarray, r: np.ndarray, idx: Callable[[int, int, int], int], lam: int) -> np.ndarray:
    """(3) multiplied out so a zero request never divides: against l0 = argmax_l r_kl (the
    paper's l = 1 fails when r_k1 = 0), c_jl r_kl0 delta_jkl - c_jl0 r_kl delta_jkl0 = 0."""
    J, K, L = len(c), len(r), int(c.shape[1])
    rows = []
    for j in range(J):
        for k in range(K):
            l0 = int(np.argmax(r[k]))
            for l in range(L):
                if l != l0:
                    row = np.zeros(lam + 1)
                    row[idx(j, k, l)] = c[j, l] * r[k, l0]
                    row[idx(j, k, l0)] -= c[j, l0] * r[k, l]
                    rows.append(row)
    return np.array(rows)


@dataclass(frozen=True)
class Assignment:
    value: float                 # lambda*_2 of the LP relaxation
    fractional: tuple[np.ndarray, ...]   # x_ij per configuration


def solve_assignment(problem: Problem, bins: tuple[np.ndarray, ...]) -> Assignment:
    """Eqs. (6)-(10) with Delta substituted: z = [x_(0,0..), x_(1,..), ..., lambda]. The (k, l)
    rows of (7) are multiples of each other, so one row per class: alpha_k lambda <=
    sum_j mu_jk sum_i N_ijk x_ij."""
    alpha, mu, n = problem.shares(), problem.speeds(), problem.counts()
    sizes = [len(b) for b in bins]
    total, K = sum(sizes), len(alpha)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    throughput = sparse.hstack([sparse.csr_matrix(-(bins[j] * mu[j]).T.astype(float)) for j in range(len(bins))])
    a_ub = sparse.hstack([throughput, sparse.csr_matrix(alpha.reshape(K, 1))]).tocsr()
    eq_rows = np.repeat(np.arange(len(bins)), sizes)
    a_eq = sparse.csr_matrix((np.ones(total), (eq_rows, np.arange(total))), shape=(len(bins), total + 1))
    objective = np.zeros(total + 1)
    objective[-1] = -1.0
    res = linprog(objective, A_ub=a_ub, b_ub=np.zeros(K), A_eq=a_eq, b_eq=n, bounds=(0, None), method="highs")
    if res.status != 0:
        raise LotesUnsolvable(f"stage 2 (machine assignment LP): {res.message}")
    return Assignment(float(-res.fun), tuple(res.x[offsets[j]:offsets[j + 1]] for j in range(len(bins))))


def round_machines(fractional: np.ndarray, count: int) -> np.ndarray:
    """The paper's rounding (section 4.2): q_j = sum of the fractional parts; round the q_j
    largest parts up and the rest down (stable order breaks ties), so sum_i x_ij = n_j."""
    floors = np.floor(fractional + 1e-9)
    parts = np.clip(fractional - floors, 0.0, None)
    q = int(round(count - floors.sum()))
    up = np.argsort(-parts, kind="stable")[:max(q, 0)]
    whole = floors.astype(np.int64)
    whole[up] += 1
    return whole


def throughput(problem: Problem, per_config: np.ndarray) -> float:
    """lambda after rounding: min_k sum_j mu_jk Ncfg_jk / alpha_k."""
    alpha, mu = problem.shares(), problem.speeds()
    served = (mu * per_config).sum(axis=0)
    return float(min(served[k] / alpha[k] for k in range(len(alpha)) if alpha[k] > 0))


def solve(problem: Problem) -> Plan:
    """Stages 1 and 2 end to end. Raises LotesUnsolvable (the caller falls back and says so)."""
    if not problem.configurations or not problem.classes:
        raise LotesUnsolvable("no machine configurations or no job classes")
    allocation = solve_allocation(problem)
    if allocation.value <= 0:
        raise LotesUnsolvable("stage 1 found no throughput: some class fits no configuration")
    c, r, notes = problem.capacities(), problem.requests(), []
    bins = []
    for j, config in enumerate(problem.configurations):
        found = nondominated_bins(c[j], r, allocation.support[j], problem.bin_cap)
        if found.truncated:
            notes.append(f"configuration {config.name}: bin enumeration stopped at the cap of {problem.bin_cap} bins")
        bins.append(found.counts)
    assignment = solve_assignment(problem, tuple(bins))
    machines = [round_machines(x, cfg.count) for x, cfg in zip(assignment.fractional, problem.configurations)]
    notes += _repair(problem, tuple(bins), assignment.fractional, machines)
    per_config = np.array([(b * m[:, None]).sum(axis=0) for b, m in zip(bins, machines)], dtype=float)
    totals = per_config.sum(axis=0)
    routing = np.divide(per_config, totals, out=np.zeros_like(per_config), where=totals > 0)
    return Plan(problem, allocation.value, assignment.value, throughput(problem, per_config), allocation.support,
                tuple(bins), tuple(machines), per_config, routing, tuple(notes))


def _repair(problem: Problem, bins: tuple[np.ndarray, ...], fractional: tuple[np.ndarray, ...],
            machines: list[np.ndarray]) -> list[str]:
    """Rounding at small n_j can leave a class no machine at all; its queue would then never
    drain. Round up the LP's largest fractional bin holding the class, in place of the bin
    of that configuration rounded up the most (section 8-P2 of the notes)."""
    notes = []
    alpha = problem.shares()
    for k in range(len(alpha)):
        if alpha[k] <= 0 or any((b[:, k] * m).sum() > 0 for b, m in zip(bins, machines)):
            continue
        options = [(float(fractional[j][i]), j, i) for j in range(len(bins))
                   for i in range(len(bins[j])) if bins[j][i, k] > 0 and fractional[j][i] > 0]
        if not options:
            continue
        _, j, i = max(options)
        excess = machines[j] - fractional[j]
        excess[i] = -np.inf
        excess[machines[j] == 0] = -np.inf
        donor = int(np.argmax(excess))
        if not np.isfinite(excess[donor]):
            continue
        machines[j][donor] -= 1
        machines[j][i] += 1
        notes.append(f"rounding left class {problem.classes[k].name} no machine; "
                     f"one machine of {problem.configurations[j].name} now emulates a bin holding it")
    return notes
