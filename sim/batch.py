"""Batch work in `tcl sim` scenarios: arrays, dependencies, gangs and time limits, each
taken as the master takes it.

- `array: 0-999%50`: the indexes and the throttle come from the master's parse_array;
  the simulator hands the round the array's unplaced indexes (Job.unplaced) and its
  throttle, and the master's round takes them lazily and applies the %N itself.
- `dependency: afterok:prep,afterany:a?...`: Slurm's form naming scenario jobs. A job
  with one is submitted held (Job.held: the round skips it); each time a job it names
  ends, the master's `evaluate` decides: met -> released, unmet -> cancelled with the
  reason naming the predecessor (or kept waiting with `keep_unmet: true`).
- `gang: true`: JobSpec.gang; the round places all of its tasks or none.
- `time_limit: 2h`: a task still running then ends there, FAILED (TimeLimit).

Scenario jobs are named, so unlike job ids at submit they can form a cycle: it is
refused at load, naming the cycle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from tcluster.domain.arrays import parse_array
from tcluster.domain.dependency import Outcome, evaluate, parse_dependency
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.lifecycle import job_state_from_counts
from tcluster.domain.model import MAX_ARRAY_TASKS
from tcluster.scheduler.yamlsrc import Located, Path
from tcluster.sim.jobs import BatchSpec, JobTrack, SimJob
from tcluster.domain.states import JobState, TaskState
from tcluster.domain.units import parse_duration

BATCH_KEYS = ("array", "dependency", "keep_unmet", "gang", "time_limit")
TIME_LIMIT = "TimeLimit"   # a task's end reason, as the agent reports it


def batch_spec(doc: Located, path: Path, body: dict[str, Any]) -> BatchSpec:
    """A scenario job's batch keys; errors name the line and the key."""
    spec = BatchSpec(keep_unmet=_flag(doc, (*path, "keep_unmet"), body.get("keep_unmet", False)),
                     gang=_flag(doc, (*path, "gang"), body.get("gang", False)))
    if "array" in body:
        spec = replace(spec, **_array(doc, (*path, "array"), body))
    if "dependency" in body:
        text = body["dependency"]
        try:
            spec = replace(spec, dependency=str(text), parsed=parse_dependency(str(text)))
        except InvalidArgument as exc:
            raise doc.error((*path, "dependency"), str(exc).removeprefix("dependency: ")) from None
    if body.get("time_limit") is not None:
        try:
            spec = replace(spec, time_limit_s=parse_duration(body["time_limit"], "time_limit"))
        except InvalidArgument as exc:
            raise doc.error((*path, "time_limit"), str(exc).removeprefix("time_limit: ")) from None
    return spec


def _array(doc: Located, path: Path, body: dict[str, Any]) -> dict[str, Any]:
    if "tasks" in body:
        raise doc.error(path, "give `array` or `tasks`, not both (an array's tasks are its indexes)")
    if body.get("gang"):
        raise doc.error(path, "an array's tasks cannot be a gang; give `tasks: N` with `gang: true`")
    text = str(body["array"])
    try:
        indexes, throttle = parse_array(text)
    except InvalidArgument as exc:
        raise doc.error(path, str(exc).removeprefix("array: ")) from None
    if len(indexes) > MAX_ARRAY_TASKS:
        raise doc.error(path, f"{len(indexes)} indexes; at most {MAX_ARRAY_TASKS} per array")
    return {"array": text, "indexes": indexes, "throttle": throttle}


def _flag(doc: Located, path: Path, value: Any) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"{value!r} must be true or false")
    return value


def check_dependencies(doc: Located, jobs: Sequence[SimJob]) -> None:
    """Every name a dependency gives is a scenario job, and no job waits on itself
    through others (the error names the cycle)."""
    index = {job.name: i for i, job in enumerate(jobs)}
    after: dict[str, tuple[str, ...]] = {}
    for i, job in enumerate(jobs):
        if job.batch.parsed is None:
            continue
        for name in job.batch.parsed.jobs:
            if name not in index:
                raise doc.error(("jobs", i, "dependency"), f"names {name!r}, which is no job of this scenario "
                                                          f"(jobs: {', '.join(list(index)[:10])})")
        after[job.name] = job.batch.parsed.jobs
    cycle = _cycle(list(index), after)
    if cycle:
        raise doc.error(("jobs", index[cycle[0]], "dependency"), f"a cycle: {' -> '.join(cycle)}")


def _cycle(names: list[str], after: dict[str, tuple[str, ...]]) -> list[str]:
    """The first cycle found (its first name repeated at the end), or []. Iterative:
    a long chain of scenario jobs must not hit the recursion limit."""
    done: set[str] = set()
    for root in names:
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(after.get(root, ()))]
        while stack:
            name = next(stack[-1], None)
            if name is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif name in on_path:
                return [*path[path.index(name):], name]
            elif name not in done:
                path.append(name)
                on_path.add(name)
                stack.append(iter(after.get(name, ())))
    return []


def job_state(track: JobTrack) -> JobState:
    """The master's rule over the simulator's counts."""
    counts = {TaskState.RUNNING: len(track.running), TaskState.PENDING: track.left,
              TaskState.SUCCEEDED: track.done, TaskState.FAILED: track.failed}
    return job_state_from_counts(counts, track.job.cancelled)


class Dependencies:
    """Who waits on whom, resolved when a named job ends (or a waiting one is submitted
    after it ended): the master's `evaluate` over the scenario's names."""

    def __init__(self, jobs: Sequence[SimJob], tracks: dict[str, JobTrack], counters: dict[str, int]) -> None:
        self.tracks, self.counters = tracks, counters
        self.dependents: dict[str, list[str]] = {}
        for job in jobs:
            for name in job.batch.parsed.jobs if job.batch.parsed is not None else ():
                self.dependents.setdefault(name, []).append(job.name)

    def state_of(self, name: str) -> JobState:
        track = self.tracks.get(name)
        return JobState.PENDING if track is None else job_state(track)

    def resolve(self, track: JobTrack, now: float) -> None:
        """A held job: released, cancelled, or still waiting (its reason says on what)."""
        parsed = track.spec.batch.parsed
        if parsed is None or not track.job.held:
            return
        verdict = evaluate(parsed, self.state_of)
        if verdict.outcome is Outcome.MET:
            track.job = replace(track.job, released=True)
            track.released_at, track.reason = now, ""
        elif verdict.outcome is Outcome.UNMET and not track.spec.batch.keep_unmet:
            self.cancel(track, now, f"dependency can no longer be met: {verdict.why}")
        elif verdict.outcome is Outcome.UNMET:
            track.reason = f"dependency can no longer be met: {verdict.why} (kept: keep_unmet)"
        else:
            track.reason = f"waiting for dependency: {verdict.why}"

    def cancel(self, track: JobTrack, now: float, reason: str) -> None:
        track.job = replace(track.job, cancelled=True, reason=reason)
        track.reason, track.ended_at = reason, now
        self.counters["jobs_cancelled"] += 1
        self.ended(track, now)

    def ended(self, track: JobTrack, now: float) -> None:
        """`track` reached its end: its submitted dependents are decided now (a cancel
        goes on down the chain); those not yet submitted are when they are."""
        for name in self.dependents.get(track.spec.name, ()):
            if name in self.tracks:
                self.resolve(self.tracks[name], now)

    def refresh(self) -> None:
        """The reasons of jobs still waiting, with their predecessors' states at the end."""
        for track in self.tracks.values():
            if track.job.held and track.spec.batch.parsed is not None and not track.reason.startswith("dependency can"):
                track.reason = f"waiting for dependency: {evaluate(track.spec.batch.parsed, self.state_of).why}"


def run_for(duration: float | None, time_limit_s: float) -> tuple[float | None, bool]:
    """How long a task runs (None: to the end of the run) and whether its limit ends it."""
    if time_limit_s and (duration is None or duration > time_limit_s):
        return time_limit_s, True
    return duration, False

