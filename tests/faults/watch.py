"""Watches a running fault test from outside: polls the master's view of some jobs and
samples every node's task cgroups, in one background thread, and records every breach of
"each task ends exactly once":

- a task's attempt number never goes down;
- an attempt seen in a terminal state never shows another state;
- SUCCEEDED and KILLED are final: no later state, no later attempt;
- once a job and all its tasks are seen terminal, none of them changes again;
- at no sampled moment do two attempts of one task have cgroups at once.

The master may be down at moments (tests restart it): failed polls are skipped.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

import grpc

from testkit.faultcluster import COMPAT, split_key, task_cgroups
from tcluster.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc

TERMINAL = {common_pb2.TASK_SUCCEEDED, common_pb2.TASK_FAILED, common_pb2.TASK_KILLED, common_pb2.TASK_LOST}
FINAL = {common_pb2.TASK_SUCCEEDED, common_pb2.TASK_KILLED}
JOB_TERMINAL = {jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED}
POLL_S = 0.1


def _name(state: int) -> str:
    return common_pb2.TaskState.Name(state)


@dataclass
class Watch:
    """Start with `start()`, add job ids with `watch()`, read `violations` after `stop()`."""

    address: Callable[[], str]
    nodes: Callable[[], Iterable[str]]
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    _jobs: set[str] = field(default_factory=set)
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)      # task -> (attempt, state)
    _job_final: dict[str, bytes] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def watch(self, *job_ids: str) -> None:
        self._jobs.update(job_ids)

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, name="fault-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self.violations

    def _run(self) -> None:
        channel, target = None, ""
        while not self._stop.wait(POLL_S):
            if self.address() != target:
                if channel is not None:
                    channel.close()
                target = self.address()
                channel = grpc.insecure_channel(target)
            self.sample_cgroups()
            assert channel is not None
            self.poll_jobs(jobs_pb2_grpc.JobServiceStub(channel))
        if channel is not None:
            channel.close()

    def sample_cgroups(self) -> None:
        attempts: dict[str, set[int]] = defaultdict(set)
        for node in list(self.nodes()):
            for key in task_cgroups(node):
                task_id, attempt = split_key(key)
                attempts[task_id].add(attempt)
        self.samples += 1
        for task_id, seen in attempts.items():
            if len(seen) > 1:
                self._violate(f"task {task_id}: attempts {sorted(seen)} have cgroups at once")

    def poll_jobs(self, stub: jobs_pb2_grpc.JobServiceStub) -> None:
        for job_id in list(self._jobs):
            try:
                job = stub.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=2)
            except grpc.RpcError:
                continue   # the master is down right now: nothing to see
            self.check_job(job)

    def check_job(self, job: jobs_pb2.Job) -> None:
        frozen = self._job_final.get(job.id)
        view = _job_view(job)
        if frozen is not None and view != frozen:
            self._violate(f"job {job.id} changed after it and its tasks were seen terminal: "
                          f"{_describe(frozen)} -> {_describe(view)}")
        if job.state in JOB_TERMINAL and all(t.state in TERMINAL for t in job.tasks) and frozen is None:
            self._job_final[job.id] = view
        for task in job.tasks:
            self.check_task(task)

    def check_task(self, task: jobs_pb2.Task) -> None:
        before = self._seen.get(task.id)
        self._seen[task.id] = (task.attempt, task.state)
        if before is None:
            return
        attempt, state = before
        where = f"task {task.id}: attempt {attempt} {_name(state)} -> attempt {task.attempt} {_name(task.state)}"
        if task.attempt < attempt:
            self._violate(f"{where}: attempt went down")
        elif state in FINAL and (task.attempt, task.state) != before:
            self._violate(f"{where}: changed after a final state")
        elif state in TERMINAL and task.attempt == attempt and task.state != state:
            self._violate(f"{where}: a terminal attempt changed state")

    def _violate(self, message: str) -> None:
        if message not in self.violations:
            self.violations.append(message)


def _job_view(job: jobs_pb2.Job) -> bytes:
    """What must not change once a job and all its tasks are terminal (usage may still be
    refreshed, shares and pending reasons are recomputed)."""
    copy = jobs_pb2.Job()
    copy.CopyFrom(job)
    copy.dominant_share = 0
    copy.pending_reason = ""
    for task in copy.tasks:
        task.ClearField("usage")
    return copy.SerializeToString(deterministic=True)


def _describe(view: bytes) -> str:
    job = jobs_pb2.Job.FromString(view)
    tasks = ", ".join(f"{t.id} a{t.attempt} {_name(t.state)} exit={t.exit_code if t.has_exit_code else None} "
                      f"sig={t.signal} {t.reason!r}" for t in job.tasks)
    return f"[{jobs_pb2.JobState.Name(job.state)}: {tasks}]"


def check_consistent(job: dict, retries: int = 0) -> list[str]:
    """The master's final view of one job (`tcl status -o json`) agrees with itself."""
    problems = []
    states = [t["state"] for t in job["tasks"]]
    if job["state"] not in {"SUCCEEDED", "FAILED", "CANCELLED"}:
        problems.append(f"job {job['id']} is {job['state']}, not terminal")
    if any(s not in {"SUCCEEDED", "FAILED", "KILLED", "LOST"} for s in states):
        problems.append(f"job {job['id']} is {job['state']} with tasks {states}")
    if (job["state"] == "SUCCEEDED") != all(s == "SUCCEEDED" for s in states) and job["state"] != "CANCELLED":
        problems.append(f"job {job['id']} is {job['state']} with tasks {states}")
    for task in job["tasks"]:
        failures = task.get("failures")
        if failures is None:
            if not COMPAT:   # older CLIs lack the field; COMPAT runs judge the rest
                problems.append(f"task {task['id']}: no `failures` in tcl status -o json")
            continue
        if not 0 <= failures <= task["attempt"] or failures > retries + 1:
            problems.append(f"task {task['id']}: attempt {task['attempt']}, failures {failures}, retries {retries}")
        if task["state"] in {"FAILED", "LOST"} and failures <= retries and job["state"] != "CANCELLED":
            problems.append(f"task {task['id']} ended {task['state']} with retries left ({failures} of {retries})")
    return problems
