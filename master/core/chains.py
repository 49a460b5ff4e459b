"""Bounds on dependency graphs, checked at submit (issue 36): how deep a chain of waiting
jobs may grow and how many jobs may wait on one job. A cascade (a cancel at the head of a
chain, one job's end releasing its dependents) does work in proportion to these, so they
bound the master loop's work per request whatever a client submits. The bounds sit far
above any real workflow (Slurm sites see chains of tens, fan-outs of hundreds).

A job's depth: 1 + the depth of the deepest still-waiting job it names (a job that ended,
or was released, starts no chain). Depths are memoized; a release clears the memo (the
state), so a chain counts only the jobs that still wait. Pure: the state's views in."""

from __future__ import annotations

from typing import Callable, MutableMapping

from tcluster.domain.errors import InvalidArgument

MAX_CHAIN_DEPTH = 1000          # jobs in one chain of waiting jobs, the new one included
MAX_WAITING_ON_ONE_JOB = 1000   # held jobs that wait on a single job's end


def chain_depth(job_id: str, parents: Callable[[str], tuple[str, ...]], held: Callable[[str], bool],
                cache: MutableMapping[str, int]) -> int:
    """The depth of held job `job_id` (0 if not held), memoized in `cache`. Iterative: a
    deep chain never meets Python's recursion limit."""
    if not held(job_id):
        return 0
    stack = [job_id]
    while stack:
        top = stack[-1]
        if top in cache:
            stack.pop()
            continue
        waiting = [p for p in parents(top) if held(p)]
        todo = [p for p in waiting if p not in cache]
        if todo:
            stack.extend(todo)
            continue
        cache[top] = 1 + max((cache[p] for p in waiting), default=0)
        stack.pop()
    return cache[job_id]


def check_chain_bounds(named: tuple[str, ...], depth_of: Callable[[str], int],
                       waiting_on: Callable[[str], int]) -> int:
    """Refuses a dependency on `named` jobs that would make a chain deeper than
    MAX_CHAIN_DEPTH, or put more than MAX_WAITING_ON_ONE_JOB jobs on one job; returns the
    new job's depth."""
    deepest = max(named, key=depth_of, default="")
    depth = 1 + (depth_of(deepest) if deepest else 0)
    if depth > MAX_CHAIN_DEPTH:
        raise InvalidArgument("dependency", f"would make a chain of {depth} waiting jobs (through job "
                                            f"{deepest[:64]!r}); at most {MAX_CHAIN_DEPTH}: wait on an "
                                            "earlier job of the chain or submit the rest once it has run")
    crowded = next((j for j in named if waiting_on(j) >= MAX_WAITING_ON_ONE_JOB), None)
    if crowded is not None:
        raise InvalidArgument("dependency", f"job {crowded[:64]!r} already has {waiting_on(crowded)} jobs "
                                            f"waiting on it; at most {MAX_WAITING_ON_ONE_JOB}: make the "
                                            "others wait on one job that waits on it")
    return depth
