"""Issue 35: who a federated task is. A federated job of N tasks runs as N one-task jobs of
its LMs (master/features/federation_live.py); without this each task saw its LM job's
identity (TCL_JOB_ID=<LM job>, TCL_TASK_INDEX=0, TCL_TASK_COUNT=1) and a federated sweep
could not tell its tasks apart.

The LM writes the federated identity into the LM job's labels, under the reserved
`tcluster.io/` prefix that a user's Submit may not use (master/core/pinning.py); the agent
reads it back from the spec it launches and gives the task the federated job's identity,
plus TCL_LM_JOB_ID (the LM job that runs it) and TCL_FEDERATION_GM (its GM's name)."""

from __future__ import annotations

from typing import Iterable

FEDERATION_OWNER = "tcluster:federation"        # as master/core/pinning.py: only the LM service makes such jobs
FED_TASK = "tcluster.io/federation-task"        # <federated job id>.<index>
FED_TASK_COUNT = "tcluster.io/federation-tasks"  # the federated job's task count
FED_ATTEMPT = "tcluster.io/federation-attempt"  # the GM's attempt of the task (0 first; a preemption adds one)
FED_GM_NAME = "tcluster.io/federation-gm-name"  # the GM that placed it
FED_ARRAY = "tcluster.io/federation-array"      # "1": the federated job is an array (its index is an array index)
FED_USER = "tcluster.io/federation-user"        # the user the GM authenticated (a secure LM only)


def reader_of(owner: str, labels: Iterable[tuple[str, str]]) -> str:
    """Who reads a job as its owner: a federated task's LM job is the federation's (so no
    user cancels it behind the GM's back), yet its user sees it through this LM's own `tcl`
    as their own (`--status-visibility own`, `tcl list --owner`, their env unredacted)."""
    if owner != FEDERATION_OWNER:
        return owner
    return dict(labels).get(FED_USER, "") or owner


def identity_labels(task_id: str, request_id: str, task_count: int, gm_name: str,
                    array: bool = False) -> tuple[tuple[str, str], ...]:
    """The labels besides FED_TASK (the LM sets that one already): the count, the attempt
    (the GM's request id is <task id>:<attempt>), the GM's name, and whether it is an array."""
    _, sep, attempt = request_id.rpartition(":")
    attempt = attempt if sep and attempt.isdigit() else "0"
    labels = ((FED_ATTEMPT, attempt), (FED_GM_NAME, gm_name), (FED_TASK_COUNT, str(max(1, task_count))))
    return (*labels, (FED_ARRAY, "1")) if array else labels


def federated_identity(owner: str, labels: Iterable[tuple[str, str]],
                       lm_job_id: str) -> tuple[tuple[str, str], ...] | None:
    """The task's environment identity when its job is a federated task; None otherwise
    (the agent then gives the job's own). Only a job of the federation's owner: a user's
    job cannot carry these labels (refused at Submit), and is never read this way."""
    if owner != FEDERATION_OWNER:
        return None
    found = dict(labels)
    job_id, sep, index = found.get(FED_TASK, "").rpartition(".")
    if not sep or not job_id or not index.isdigit():
        return None
    env = (("TCL_JOB_ID", job_id), ("TCL_TASK_INDEX", index),
           ("TCL_TASK_COUNT", found.get(FED_TASK_COUNT, "1")), ("TCL_ATTEMPT", found.get(FED_ATTEMPT, "0")),
           ("TCL_LM_JOB_ID", lm_job_id), ("TCL_FEDERATION_GM", found.get(FED_GM_NAME, "")))
    # An array's task also sees its index as a local array's does (agent/tasks.py).
    return (*env, ("TCL_ARRAY_TASK_ID", index)) if found.get(FED_ARRAY) == "1" else env
