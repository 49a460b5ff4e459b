"""Who may do what: pure, table-driven, default deny.

Two roles. An admin may do everything. A user may submit to queues their grants match
(globs over the queue path; a plain path also grants its subtree), read every job's
status (or only their own, with `--status-visibility own`), and read the logs of and
cancel only their own jobs; a job's secrets (its env values, and its command where the
queue hides it) are shown only to its owner and admins. A user's tasks run as the Unix user the master maps them to;
only admins may pick another (`--user`). Every decision says why, for the caller and for
the audit line."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Callable, Union

STATUS_VISIBILITIES = ("all", "own")


@dataclass(frozen=True)
class Caller:
    name: str
    admin: bool
    unix_user: str                       # "" = the agent's default user
    grants: tuple[str, ...] = ()         # queue globs

    @property
    def role(self) -> str:
        return "admin" if self.admin else "user"


# Without TLS material every caller is this one: today's behaviour, kept for tests and dev.
ANONYMOUS = Caller("anonymous", True, "", ("*",))


@dataclass(frozen=True)
class Policy:
    status_visibility: str = "all"       # all | own


# ---- operations a caller asks for ----

@dataclass(frozen=True)
class SubmitJob:
    queue: str
    run_as: str                          # the job's --user; "" = not asked
    weight: float
    max_job_weight: float


@dataclass(frozen=True)
class ReadJob:
    job_id: str
    owner: str


@dataclass(frozen=True)
class ListJobs:
    owner: str                           # the filter asked for; "" = everyone's


@dataclass(frozen=True)
class ReadLogs:
    job_id: str
    owner: str


@dataclass(frozen=True)
class ExecInTask:
    job_id: str
    task: str                            # the task's id
    owner: str
    command: str                         # what runs, for the audit line


@dataclass(frozen=True)
class CancelJob:
    job_id: str
    owner: str


@dataclass(frozen=True)
class ReadCluster:
    what: str                            # nodes | queues | whoami


@dataclass(frozen=True)
class OperateNodes:
    op: str                              # cordon | uncordon | drain | maint
    nodes: tuple[str, ...]


# What a caller may ask for (one rule each in _RULES).
Operation = Union[SubmitJob, ReadJob, ListJobs, ReadLogs, CancelJob, ReadCluster, OperateNodes, ExecInTask]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    why: str


def grants_queue(grants: tuple[str, ...], queue: str) -> bool:
    return any(fnmatchcase(queue, g) or queue.startswith(g + ".") for g in grants if g)


def _grants_text(caller: Caller) -> str:
    return ", ".join(caller.grants) if caller.grants else "none"


def _submit(caller: Caller, a: SubmitJob, policy: Policy) -> Decision:
    if not grants_queue(caller.grants, a.queue):
        return Decision(False, f"user {caller.name} may not submit to queue {a.queue}: "
                               f"their grants are {_grants_text(caller)}")
    if a.run_as and a.run_as != caller.unix_user:
        mapped = caller.unix_user or "the agent's default user"
        return Decision(False, f"user {caller.name} may not run tasks as {a.run_as!r}: only admins may choose "
                               f"--user; {caller.name}'s tasks run as {mapped!r}")
    if a.weight > a.max_job_weight:
        return Decision(False, f"user {caller.name} may not ask weight {a.weight:g} in queue {a.queue}: "
                               f"its max_job_weight is {a.max_job_weight:g}")
    return Decision(True, f"queue {a.queue} matches grants {_grants_text(caller)}")


def _read_job(caller: Caller, a: ReadJob, policy: Policy) -> Decision:
    if policy.status_visibility == "all":
        return Decision(True, "every user may read every job's status")
    return _own(caller, a.owner, f"read the status of job {a.job_id}", "(status visibility: own)")


def _list_jobs(caller: Caller, a: ListJobs, policy: Policy) -> Decision:
    if policy.status_visibility == "all" or not a.owner or a.owner == caller.name:
        return Decision(True, "listed jobs are filtered to what the caller may read")
    return Decision(False, f"user {caller.name} may not list the jobs of {a.owner} (status visibility: own)")


def _own(caller: Caller, owner: str, what: str, note: str = "") -> Decision:
    if owner == caller.name:
        return Decision(True, f"{caller.name} owns it")
    suffix = f" {note}" if note else ""
    return Decision(False, f"user {caller.name} may not {what}: it belongs to {owner or 'nobody'}{suffix}")


def _logs(caller: Caller, a: ReadLogs, policy: Policy) -> Decision:
    return _own(caller, a.owner, f"read the logs of job {a.job_id}")


def _cancel(caller: Caller, a: CancelJob, policy: Policy) -> Decision:
    return _own(caller, a.owner, f"cancel job {a.job_id}")


def _exec(caller: Caller, a: ExecInTask, policy: Policy) -> Decision:
    return _own(caller, a.owner, f"exec into task {a.task} of job {a.job_id}")


def _cluster(caller: Caller, a: ReadCluster, policy: Policy) -> Decision:
    return Decision(True, f"every user may read {a.what}")


def _operate(caller: Caller, a: OperateNodes, policy: Policy) -> Decision:
    """Taking nodes out of service moves everyone's tasks: admins only (as `scontrol
    update state=drain` is root's or SlurmUser's)."""
    return Decision(False, f"user {caller.name} may not {a.op} nodes: node operations are for admins")


_RULES: dict[type, Callable[[Caller, object, Policy], Decision]] = {
    SubmitJob: _submit,            # type: ignore[dict-item]
    ReadJob: _read_job,            # type: ignore[dict-item]
    ListJobs: _list_jobs,          # type: ignore[dict-item]
    ReadLogs: _logs,               # type: ignore[dict-item]
    CancelJob: _cancel,            # type: ignore[dict-item]
    ReadCluster: _cluster,         # type: ignore[dict-item]
    OperateNodes: _operate,        # type: ignore[dict-item]
    ExecInTask: _exec,             # type: ignore[dict-item]
}


def decide(caller: Caller, action: object, policy: Policy = Policy()) -> Decision:
    """Admins may do everything; a user what the rule for the action allows; anything
    without a rule is refused."""
    rule = _RULES.get(type(action))
    if rule is None:
        return Decision(False, f"no rule allows {type(action).__name__}")
    if caller.admin:
        return Decision(True, "admin")
    return rule(caller, action, policy)


def run_as(caller: Caller, requested: str) -> str:
    """The Unix user a job runs as: an admin's choice, else the caller's mapping
    ("" = the agent's default user)."""
    if caller.admin and requested:
        return requested
    return caller.unix_user


def sees_secrets(caller: Caller, owner: str) -> bool:
    """Whether the caller reads a job's owner-only fields (tcluster/views/redaction.py)."""
    return caller.admin or (bool(owner) and caller.name == owner)


def sees_only_own(caller: Caller, policy: Policy) -> bool:
    return not caller.admin and policy.status_visibility == "own"


def audit_line(caller: Caller, action: object, decision: Decision) -> str:
    """who, what, allowed or not, why; never a secret (actions hold none)."""
    what = type(action).__name__
    fields = " ".join(f"{k}={v!r}" for k, v in vars(action).items())
    verdict = "allowed" if decision.allowed else "DENIED"
    return f"{verdict} {caller.role} {caller.name!r} {what} {fields}: {decision.why}"
