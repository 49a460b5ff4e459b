"""The parsers of the lifecycle verbs (README, "Hold, release, requeue, wait"): `tcl hold`,
`release`, `requeue`, `wait`, a multi-id and filtered `cancel`, and `update` of a pending
job. Plain values only, so building them imports no grpc (cli/main.py)."""

from __future__ import annotations

import argparse
from typing import Any

from tcluster.cli.options import non_negative_int

LIFECYCLE_COMMANDS = {
    "hold": "tcluster.cli.lifecycle:hold", "release": "tcluster.cli.lifecycle:release",
    "requeue": "tcluster.cli.lifecycle:requeue", "wait": "tcluster.cli.lifecycle:wait",
}
EXIT_WAIT_TIMEOUT = 124       # as timeout(1): `tcl wait --timeout` ran out
CANCEL_STATES = ("PENDING", "RUNNING")
_RAW = argparse.RawDescriptionHelpFormatter


def add_lifecycle_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("hold", parents=[common], help="keep jobs' pending tasks from starting (running ones go on)",
                       description="Like Slurm's `scontrol hold`: the jobs' pending tasks wait until `tcl release`;\n"
                       "tasks already running keep running. A job with nothing pending is refused.",
                       formatter_class=_RAW)
    p.add_argument("job_ids", metavar="ID", nargs="+")
    p = sub.add_parser("release", parents=[common], help="let held jobs' pending tasks start again")
    p.add_argument("job_ids", metavar="ID", nargs="+")

    p = sub.add_parser("requeue", parents=[common], help="run jobs' tasks again (running ones are stopped first)",
                       description="Like Slurm's `scontrol requeue`: each task named goes back to pending. A running\n"
                       "one is stopped first (SIGTERM, the grace, SIGKILL) and waits once it has ended, so two\n"
                       "copies never run; an ended one waits at once. The next run is the next attempt\n"
                       "(`tcl logs --attempt N` reads an earlier one's log); no --retries is used.",
                       formatter_class=_RAW)
    p.add_argument("job_ids", metavar="ID", nargs="+")
    p.add_argument("--tasks", metavar="INDEXES", help="only these tasks, e.g. 5-9,12 (one ID only)")

    p = sub.add_parser(
        "wait", parents=[common], help="wait until jobs end; the exit code says how they ended",
        description="Waits until every job named has ended, printing progress on stderr, and riding out a\n"
        "master restart or failover. Exit code: 0 every job succeeded; else the highest exit code of a\n"
        "failed task (128+N for a task killed by signal N; 1 for a failure without one, or a cancelled\n"
        f"job; a task's own {EXIT_WAIT_TIMEOUT} is given as 1); {EXIT_WAIT_TIMEOUT} --timeout ran out first.",
        formatter_class=_RAW)
    p.add_argument("job_ids", metavar="ID", nargs="+")
    p.add_argument("--timeout", metavar="DURATION", help="give up after this long: 90s, 10m, 2h, 1:30:00")


def add_cancel(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "cancel", parents=[common], help="cancel jobs by id or filter; prints what it cancelled",
        description="Cancels the jobs named, or the pending and running jobs the filters match (like Slurm's\n"
        "scancel). Filters select your own jobs unless --user names another (others' jobs: admins only);\n"
        "with IDs too, only the named jobs that match are cancelled. No ID and no filter is a usage error.",
        formatter_class=_RAW)
    p.add_argument("job_ids", metavar="ID", nargs="*")
    p.add_argument("--tasks", metavar="INDEXES",
                   help="only these tasks, e.g. 5-9,12 (an array's indexes; one ID only); running ones are killed")
    p.add_argument("--user", help="jobs of this user (default with filters: your own)")
    p.add_argument("--state", action="append", type=str.upper, choices=CANCEL_STATES,
                   help="only jobs in this state (repeatable; default both)")
    p.add_argument("--name", help="only jobs with this name")
    p.add_argument("--queue", help="only jobs of this queue")


def add_update(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "update", parents=[common], help="change a job: throttle; a pending job's request, queue, weight",
        description="--throttle changes while the job runs. --cpu, --mem, --time-limit, --queue and --weight\n"
        "change a job none of whose tasks runs (hold it, or requeue its running tasks, first), and are\n"
        "checked as at submit: the same forms and limits, the queue must exist and you must be\n"
        "allowed to submit to it.", formatter_class=_RAW)
    p.add_argument("job_id", metavar="ID")
    p.add_argument("--throttle", type=non_negative_int, metavar="N",
                   help="at most N of the array's tasks running at once (0: no limit)")
    p.add_argument("--cpu", help="cores per task, as at submit")
    p.add_argument("--mem", help="memory per task, as at submit")
    p.add_argument("--time-limit", dest="time_limit", metavar="DURATION", help="as at submit (0: none)")
    p.add_argument("--queue", help="another leaf queue you may submit to")
    p.add_argument("--weight", type=float, help="its weight among its queue's jobs, as at submit")
