"""The lifecycle verbs (README, "Hold, release, requeue, wait"): one function per `tcl`
subcommand, (parsed args, master client) -> exit code. Verbs over several ids go on past
a refused one (naming it on stderr) and exit 1 if any was refused, as Slurm's do."""

from __future__ import annotations

import argparse
import time
from typing import Callable, Iterable

import grpc

from tcluster.cli.client import MasterClient, explain_rpc_error, is_unreachable
from tcluster.cli.commands import JSON_OUTPUT, POLL_INTERVAL_SECONDS, UNREACHABLE_POLLS_TOLERATED, own_name, \
    print_json, reply_job_json, report, with_all_rows
from tcluster.cli.lifecycleparser import CANCEL_STATES, EXIT_WAIT_TIMEOUT
from tcluster.cli.names import job_state_name, shown_job_state
from tcluster.cli.options import EXIT_FAILURE, EXIT_OK
from tcluster.cli.tables import failure_summary, progress_line
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.states import JobState
from tcluster.domain.slurmunits import parse_memory, parse_time_limit
from tcluster.domain.units import format_bytes, format_duration, parse_cpu, parse_duration
from tcluster.v1 import common_pb2, jobs_pb2
from tcluster.wire.basics import job_state_to_pb

# A long wait polls less often: every second for a minute, then every SLOW_POLL_S.
SLOW_POLL_AFTER_S, SLOW_POLL_S = 60.0, 5.0
_TERMINAL = frozenset(job_state_to_pb(s) for s in JobState if s.terminal)


def _each(args: argparse.Namespace, client: MasterClient, ids: Iterable[str],
          act: Callable[[str], jobs_pb2.Job], done: Callable[[jobs_pb2.Job], str],
          line: Callable[[jobs_pb2.Job], str] | None = None) -> int:
    """Runs `act` on every id; prints each job's line (or JSON of all); 1 if any was refused."""
    ids = list(ids)
    failed, answered = False, []
    for job_id in ids:
        try:
            answered.append(act(job_id))
        except grpc.RpcError as error:
            if is_unreachable(error) or len(ids) == 1:    # one job: the error as every command prints it
                raise
            failed = True
            report(f"{job_id}: {explain_rpc_error(error, client.address)[1]}")
    if args.output == JSON_OUTPUT:
        print_json([reply_job_json(job) for job in answered])
    else:
        for job in answered:
            print(line(job) if line is not None else f"{job.id}: {done(job)}")
    return EXIT_FAILURE if failed else EXIT_OK


def hold(args: argparse.Namespace, client: MasterClient) -> int:
    return _each(args, client, args.job_ids, lambda j: client.job_verb("Hold", jobs_pb2.HoldJobRequest(id=j)),
                 lambda job: f"held ({shown_job_state(job)})")


def release(args: argparse.Namespace, client: MasterClient) -> int:
    return _each(args, client, args.job_ids, lambda j: client.job_verb("Release", jobs_pb2.ReleaseJobRequest(id=j)),
                 lambda job: f"released ({job_state_name(job.state)})")


def requeue(args: argparse.Namespace, client: MasterClient) -> int:
    if args.tasks and len(args.job_ids) > 1:
        raise InvalidArgument("tasks", "--tasks names the tasks of one job: give one ID with it")
    return _each(args, client, args.job_ids,
                 lambda j: client.job_verb("Requeue", jobs_pb2.RequeueJobRequest(id=j, tasks=args.tasks or "")),
                 lambda job: f"requeued ({job_state_name(job.state)})")


def cancel(args: argparse.Namespace, client: MasterClient) -> int:
    filtered = any((args.user, args.state, args.name, args.queue))
    if not args.job_ids and not filtered:
        raise InvalidArgument("ID", "name the jobs to cancel, or filter them with --user, --state, --name or "
                                    "--queue (tcl cancel --help)")
    if args.tasks and len(args.job_ids) != 1:
        raise InvalidArgument("tasks", "--tasks names the tasks of one job: give one ID with it")
    ids = matching_ids(args, client) if filtered else list(args.job_ids)
    if filtered and not ids:
        report("no pending or running job matches")
    if not filtered and len(ids) == 1:          # one job named: its new state, as before several could be
        return _each(args, client, ids, lambda j: client.cancel(j, args.tasks or ""), lambda job: "",
                     line=lambda job: job_state_name(job.state))
    return _each(args, client, ids, lambda j: client.cancel(j, args.tasks or ""),
                 lambda job: job_state_name(job.state))


def matching_ids(args: argparse.Namespace, client: MasterClient) -> list[str]:
    """The pending and running jobs the filters match (your own unless --user), oldest first;
    with IDs too, only those of them."""
    owner = args.user or own_name(client)
    states = [job_state_to_pb(JobState(s)) for s in (args.state or CANCEL_STATES)]
    listed, _ = client.list_jobs(states, args.queue or "", 0, all_jobs=True, owner=owner)
    named = set(args.job_ids)
    return [job.id for job in sorted(listed, key=lambda j: j.submitted_at)
            if (not args.name or job.spec.name == args.name) and (not named or job.id in named)
            and (not owner or job.spec.owner == owner)]


def update(args: argparse.Namespace, client: MasterClient) -> int:
    request = jobs_pb2.UpdateJobRequest(id=args.job_id)
    if args.throttle is not None:
        request.throttle = args.throttle
    if args.cpu is not None:
        request.cpu = parse_cpu(args.cpu, "--cpu")
    if args.mem is not None:
        request.memory = parse_memory(args.mem, "--mem")        # Slurm's units, as at submit
    if args.time_limit is not None:
        request.time_limit_s = parse_time_limit(args.time_limit, "--time-limit")
    if args.queue is not None:
        request.queue = args.queue
    if args.weight is not None:
        request.weight = args.weight
    if len(request.ListFields()) == 1:
        raise InvalidArgument("update", "nothing to change: give --throttle, --cpu, --mem, --time-limit, --queue "
                                        "or --weight")
    job = client.job_verb("Update", request)
    if args.output == JSON_OUTPUT:
        print_json(reply_job_json(job))
    else:
        spec = job.spec
        limit = format_duration(spec.time_limit_s) if spec.time_limit_s else "none"
        print(f"{job.id}: cpu {spec.resources.cpu:g}, memory {format_bytes(spec.resources.memory)}, time limit "
              f"{limit}, queue {spec.queue}, weight {spec.weight or 1:g}, throttle {job.throttle or 'none'}")
    return EXIT_OK


def wait(args: argparse.Namespace, client: MasterClient, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> int:
    timeout_s = parse_duration(args.timeout, "--timeout") if args.timeout else 0.0
    start = clock()
    waiting, ended = list(dict.fromkeys(args.job_ids)), {}
    lines: dict[str, str] = {}
    misses = 0
    while waiting:
        try:
            for job_id in list(waiting):
                job = client.get(job_id)
                if (line := progress_line(job)) != lines.get(job_id):
                    report(line)
                    lines[job_id] = line
                if job.state in _TERMINAL:
                    # A failed row past the rows a compact job's Get sent still sets the exit code.
                    ended[job_id] = job if job.state == jobs_pb2.JOB_SUCCEEDED else with_all_rows(client, job)
                    waiting.remove(job_id)
            misses = 0
        except grpc.RpcError as error:      # a master restart or failover: it keeps jobs on disk
            misses += 1
            if not is_unreachable(error) or misses > UNREACHABLE_POLLS_TOLERATED:
                raise
            report(f"master unreachable, retrying ({misses}/{UNREACHABLE_POLLS_TOLERATED})")
        if not waiting:
            break
        if timeout_s and clock() - start >= timeout_s:
            report(f"tcl wait: --timeout {format_duration(timeout_s)} ran out; still running: {', '.join(waiting)}")
            return EXIT_WAIT_TIMEOUT
        sleep(SLOW_POLL_S if clock() - start > SLOW_POLL_AFTER_S else POLL_INTERVAL_SECONDS)
    if args.output == JSON_OUTPUT:
        print_json([reply_job_json(ended[j]) for j in dict.fromkeys(args.job_ids)])
    return wait_exit_code(ended.values())


def wait_exit_code(jobs: Iterable[jobs_pb2.Job]) -> int:
    """0 every job succeeded; else the highest code of a failed task (128+N for signal N),
    1 for a failure without one or a cancelled job. EXIT_WAIT_TIMEOUT stays --timeout's."""
    code = EXIT_OK
    for job in jobs:
        if job.state == jobs_pb2.JOB_SUCCEEDED:
            continue
        why = failure_summary(job)
        if why:
            report(f"job {job.id}: {why}")
        code = max(code, 1, *(task_code(t) for t in job.tasks))
    return 1 if code == EXIT_WAIT_TIMEOUT else code


def task_code(task: jobs_pb2.Task) -> int:
    if task.state != common_pb2.TASK_FAILED:
        return 0
    if task.signal:
        return min(128 + task.signal, 255)
    return min(task.exit_code, 255) if task.has_exit_code else 1
