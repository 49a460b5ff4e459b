"""One function per `tcl` subcommand: (parsed args, master client) -> exit code.

Results go to stdout (a job id, a table, or JSON); progress and errors go to stderr, so
`ID=$(tcl submit ...)` and `tcl jobs -o json | jq` stay clean.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Any, BinaryIO, Callable

import grpc

from tcluster.cli.client import MasterClient, SubmitOutcomeUnknown, is_unreachable
from tcluster.cli.options import EXIT_FAILURE, EXIT_OK
from tcluster.cli.names import job_state_name
from tcluster.cli.tables import failure_summary, job_view, jobs_table, lotes_line, nodes_table, progress_line
from tcluster.domain.states import JobState
from tcluster.domain.units import parse_bytes
from tcluster.v1 import jobs_pb2
from tcluster.wire.basics import job_state_to_pb

JSON_OUTPUT = "json"
# --wait polls Get; once a second is plenty for humans and cheap for the master.
POLL_INTERVAL_SECONDS = 1.0
# While waiting, ride out a master restart (it keeps jobs on disk) for about this many polls.
UNREACHABLE_POLLS_TOLERATED = 30
_TERMINAL_JOB_STATES = frozenset(job_state_to_pb(state) for state in JobState if state.terminal)


def reply_job_json(job: jobs_pb2.Job) -> Any:
    # The JSON views load the job model; only `-o json` needs them (the tables read the reply).
    from tcluster.cli.replies import reply_job_json as view
    return view(job)


def reply_node_json(node: jobs_pb2.Node, lotes: jobs_pb2.LotesStatus | None) -> Any:
    from tcluster.cli.replies import reply_node_json as view
    return view(node, lotes)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def submit(args: argparse.Namespace, client: MasterClient) -> int:
    # Only `submit` loads what it alone needs: YAML for job files, uuid (and platform) for the key.
    import uuid

    from tcluster.cli.spec import submission_spec
    from tcluster.cli.submitsummary import summary_line
    from tcluster.wire.protobuf import spec_to_pb
    spec = submission_spec(args)  # usage errors surface here, before any network call
    # One key per command: its own retries (a failover, a lost reply) never make a second job.
    spec = replace(spec, request_id=spec.request_id or uuid.uuid4().hex)
    try:
        job = client.submit(spec_to_pb(spec), on_retry=report)
    except SubmitOutcomeUnknown as error:
        report(f"tcl submit: the job may or may not exist; the same command with --request-id "
               f"{error.request_id} submits it at most once (it returns the job if there is one)")
        raise
    wants_json = args.output == JSON_OUTPUT
    if not wants_json:
        print(job.id, flush=True)  # first, so `ID=$(tcl submit --wait ...)` works too
    report(f"{job.id}: {summary_line(spec)}")     # what was understood (units, directory), on stderr
    if args.wait:
        job = wait_for_job(client, job.id)
    if wants_json:
        print_json(reply_job_json(job))
    if not args.wait:
        return EXIT_OK
    return EXIT_OK if job.state == jobs_pb2.JOB_SUCCEEDED else EXIT_FAILURE


def wait_for_job(
    client: MasterClient, job_id: str, sleep: Callable[[float], None] = time.sleep,
) -> jobs_pb2.Job:
    """Poll until the job is terminal, printing each change of progress to stderr."""
    last_line = ""
    misses = 0
    while True:
        try:
            job = client.get(job_id)
            misses = 0
        except grpc.RpcError as error:
            misses += 1
            if not is_unreachable(error) or misses > UNREACHABLE_POLLS_TOLERATED:
                raise
            report(f"job {job_id}: master unreachable, retrying ({misses}/{UNREACHABLE_POLLS_TOLERATED})")
            sleep(POLL_INTERVAL_SECONDS)
            continue
        line = progress_line(job)
        if line != last_line:
            report(line)
            last_line = line
        if job.state in _TERMINAL_JOB_STATES:
            if job.state != jobs_pb2.JOB_SUCCEEDED:
                with_all_rows(client, job)     # the first failed task may be past the rows sent
            why = failure_summary(job)
            if job.state != jobs_pb2.JOB_SUCCEEDED and why:
                report(f"job {job_id}: {why}")
            return job
        sleep(POLL_INTERVAL_SECONDS)


def jobs(args: argparse.Namespace, client: MasterClient) -> int:
    wanted = [job_state_to_pb(JobState(name)) for name in args.state or ()]
    owner = getattr(args, "owner", "") or ("" if getattr(args, "all_users", False) else own_name(client))
    listed, total = client.list_jobs(wanted, args.queue or "", args.limit, args.all, owner)
    # Newest first even if the master returned another order.
    listed.sort(key=lambda job: job.submitted_at, reverse=True)
    if args.output == JSON_OUTPUT:
        print_json([reply_job_json(job) for job in listed])
    else:
        print(jobs_table(listed, now=time.time()))
        if total > len(listed):
            report(f"(the newest {len(listed)} of {total} jobs; --all for every one, --limit N for more)")
    return EXIT_OK


def own_name(client: MasterClient) -> str:
    """Who the master takes the caller to be; "" (everyone's) from a master without WhoAmI."""
    try:
        return client.whoami().name
    except grpc.RpcError as error:
        if error.code() is not grpc.StatusCode.UNIMPLEMENTED:   # type: ignore[attr-defined]
            raise
        return ""


def with_all_rows(client: MasterClient, job: jobs_pb2.Job) -> jobs_pb2.Job:
    """`job` with every task row, paged through GetJobTasks where Get sent only some (a
    compact job): what reads rows (an exit code, the first failed task) then sees them all."""
    if job.tasks_compact:
        rows = client.all_tasks(job.id)
        del job.tasks[:]
        job.tasks.extend(rows)
        job.tasks_compact, job.compact_note = False, ""
        del job.task_ranges[:]
    return job


def status(args: argparse.Namespace, client: MasterClient) -> int:
    job = client.get(args.job_id)
    if getattr(args, "all_tasks", False):
        with_all_rows(client, job)
    if args.output == JSON_OUTPUT:
        print_json(reply_job_json(job))
    else:
        print(job_view(job, now=time.time()))
    return EXIT_OK


def cancel(args: argparse.Namespace, client: MasterClient) -> int:
    job = client.cancel(args.job_id, args.tasks or "")
    if args.output == JSON_OUTPUT:
        print_json(reply_job_json(job))
    else:
        print(job_state_name(job.state))
    return EXIT_OK


def update(args: argparse.Namespace, client: MasterClient) -> int:
    job = client.update(args.job_id, throttle=args.throttle)
    if args.output == JSON_OUTPUT:
        print_json(reply_job_json(job))
    else:
        print(f"{job.id}: throttle {job.throttle or 'none'}")
    return EXIT_OK


def logs(args: argparse.Namespace, client: MasterClient) -> int:
    tail = parse_bytes(args.tail, "--tail") if args.tail is not None else 0
    request = jobs_pb2.LogsRequest(
        job_id=args.job_id, task_index=args.task, tail_bytes=tail, follow=args.follow,
        stream=jobs_pb2.LOG_STDERR if args.stderr else jobs_pb2.LOG_STDOUT, attempt=getattr(args, "attempt", 0),
    )
    sink = binary_stdout()
    for chunk in client.logs(request):
        sink.write(chunk.data)
        sink.flush()  # a log is read as it arrives, not when the stream ends
    return EXIT_OK


def binary_stdout() -> BinaryIO:
    """stdout as bytes: logs may hold anything, including invalid UTF-8."""
    sys.stdout.flush()
    return sys.stdout.buffer


def nodes(args: argparse.Namespace, client: MasterClient) -> int:
    response = client.nodes_response()
    listed = sorted(response.nodes, key=lambda node: node.name)
    lotes = response.lotes if response.HasField("lotes") else None
    if args.output == JSON_OUTPUT:
        print_json([reply_node_json(node, lotes) for node in listed])
    else:
        print(nodes_table(listed, lotes=lotes is not None, now=time.time()))
        if lotes is not None:
            print(lotes_line(lotes))
    return EXIT_OK


def dev(args: argparse.Namespace) -> int:
    try:
        # Lazy: dev mode pulls in the master and agent; other commands must not pay for it.
        from tcluster.cli.devmode import run_dev
    except ModuleNotFoundError as exc:
        if exc.name not in ("tcluster.cli.devmode", "tcluster"):
            raise
        report("error: dev mode is not available in this installation (tcluster.cli.devmode is missing)")
        return EXIT_FAILURE
    return int(run_dev(args) or 0)
