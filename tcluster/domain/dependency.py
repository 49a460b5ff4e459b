"""Job dependencies in Slurm's form: `afterok:J1:J2,afterany:J3` (every term must hold) or
`afterok:J1?afternotok:J2` (any one term). A term holds when each of its jobs ended as it
asks: afterok SUCCEEDED, afternotok FAILED or CANCELLED, afterany any end.

Pure: the predecessors' states in, met / waiting / unmet (with the predecessor that made
it so) out. Evaluated on each predecessor's end, never by polling (master/core)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.states import JobState

KINDS = ("afterok", "afterany", "afternotok")
MAX_DEPENDENCY_JOBS = 100
_JOB = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Outcome(Enum):
    MET = "met"
    WAITING = "waiting"
    UNMET = "unmet"          # can no longer be met


@dataclass(frozen=True)
class Term:
    kind: str
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class Dependency:
    terms: tuple[Term, ...]
    any_of: bool = False     # `?`: one term is enough

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(j for t in self.terms for j in t.jobs))


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    why: str                 # e.g. "afterok:J1 (J1 FAILED)"


def parse_dependency(text: str, field: str = "dependency") -> Dependency:
    text = text.strip()
    if "," in text and "?" in text:
        raise InvalidArgument(field, "use `,` (all must hold) or `?` (any one), not both")
    any_of = "?" in text
    terms = [_term(part.strip(), field) for part in text.split("?" if any_of else ",")]
    dependency = Dependency(tuple(terms), any_of)
    if len(dependency.jobs) > MAX_DEPENDENCY_JOBS:
        raise InvalidArgument(field, f"names {len(dependency.jobs)} jobs; at most {MAX_DEPENDENCY_JOBS}")
    return dependency


def _term(part: str, field: str) -> Term:
    kind, _, rest = part.partition(":")
    if kind not in KINDS or not rest:
        raise InvalidArgument(field, f"{part[:60]!r} is not KIND:JOB[:JOB...] with KIND one of {', '.join(KINDS)}")
    jobs = tuple(rest.split(":"))
    bad = next((j for j in jobs if not _JOB.match(j)), None)
    if bad is not None:
        raise InvalidArgument(field, f"{bad[:64]!r} is not a job id")
    return Term(kind, jobs)


def evaluate(dependency: Dependency, state_of: Callable[[str], JobState | None]) -> Verdict:
    """`state_of`: a predecessor's state (None: unknown, taken as never able to satisfy)."""
    verdicts = [_term_verdict(term, state_of) for term in dependency.terms]
    if dependency.any_of:
        met = next((v for v in verdicts if v.outcome is Outcome.MET), None)
        if met is not None:
            return met
        if all(v.outcome is Outcome.UNMET for v in verdicts):
            return Verdict(Outcome.UNMET, " and ".join(v.why for v in verdicts))
        return Verdict(Outcome.WAITING, " or ".join(v.why for v in verdicts if v.outcome is Outcome.WAITING))
    unmet = next((v for v in verdicts if v.outcome is Outcome.UNMET), None)
    if unmet is not None:
        return unmet
    waiting = [v.why for v in verdicts if v.outcome is Outcome.WAITING]
    return Verdict(Outcome.WAITING, ", ".join(waiting)) if waiting else Verdict(Outcome.MET, "")


def _term_verdict(term: Term, state_of: Callable[[str], JobState | None]) -> Verdict:
    waiting = []
    for job in term.jobs:
        state = state_of(job)
        label = f"{term.kind}:{job} ({state.value if state is not None else 'unknown'})"
        if state is None or _impossible(term.kind, state):
            return Verdict(Outcome.UNMET, label)
        if not _satisfied(term.kind, state):
            waiting.append(label)
    return Verdict(Outcome.WAITING, ", ".join(waiting)) if waiting else Verdict(Outcome.MET, "")


def _satisfied(kind: str, state: JobState) -> bool:
    if kind == "afterok":
        return state is JobState.SUCCEEDED
    if kind == "afternotok":
        return state in (JobState.FAILED, JobState.CANCELLED)
    return state.terminal


def _impossible(kind: str, state: JobState) -> bool:
    if kind == "afterok":
        return state in (JobState.FAILED, JobState.CANCELLED)
    if kind == "afternotok":
        return state is JobState.SUCCEEDED
    return False


def dependency_reason(text: str, state_of: Callable[[str], JobState | None]) -> str:
    """Why a held job waits, for `tcl status` and `tcl why`."""
    verdict = evaluate(parse_dependency(text), state_of)
    if verdict.outcome is Outcome.UNMET:
        return f"dependency can no longer be met: {verdict.why} (kept: --keep-on-unmet-dependency)"
    return f"waiting for dependency: {verdict.why}"
