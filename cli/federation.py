"""`tcl --federation GM,...`: submit, status, cancel, list and `federation status` against
Megha's global managers (tcl-gm's GlobalManagerService). Any GM takes any request (it
forwards a job to the GM that owns its queue or id): the addresses are tried in turn until
one answers. `list` and `federation status` ask every GM named, since each holds its own
jobs and its own view of the LMs.

Exit codes as for every `tcl` command: 0 ok, 1 a GM refused or none answered, 2 usage."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import grpc

from tcluster.cli.fedtables import job_json, job_view, jobs_table, status_json, status_tables
from tcluster.cli.options import EXIT_FAILURE, EXIT_OK
from tcluster.domain.errors import InvalidArgument
from tcluster.daemonkit.leaders import MasterTour, parse_addresses
from tcluster.v1 import federation_pb2 as fpb, federation_pb2_grpc

TIMEOUT_S = 10.0
# The `tcl submit` options a federated job carries (tcl-gm runs each task as a one-task job
# of an LM master with the job's queue, size, constraints, env and command).
SUBMIT_SUPPORTED = frozenset({"name", "queue", "tasks", "cpu", "mem", "resources", "constraint", "env",
                              "command", "request_id",
                              # issue 35: what each LM applies to a task as it would to its own job's
                              "time_limit", "export", "stdout_file", "stderr_file", "retries",
                              "array"})     # one task per index, at most %N at once (gm/fedarray.py)
_MOVE_ON = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class GMClient:
    """One channel per GM; `call` tries them in turn (the last that answered first)."""

    def __init__(self, addresses: tuple[str, ...], timeout_s: float = TIMEOUT_S,
                 tls: grpc.ChannelCredentials | None = None) -> None:
        self.addresses, self.timeout_s = addresses, timeout_s
        self.address = addresses[0]
        self.channels = {a: grpc.secure_channel(a, tls) if tls is not None else grpc.insecure_channel(a)
                         for a in addresses}
        self.metadata = user_metadata(addresses, tls is not None)

    def __enter__(self) -> GMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        for ch in self.channels.values():
            ch.close()

    def stub(self, address: str) -> federation_pb2_grpc.GlobalManagerServiceStub:
        return federation_pb2_grpc.GlobalManagerServiceStub(self.channels[address])

    def call(self, method: str, request: Any) -> Any:
        # A MasterTour with no hint to follow: GMs have no leader (any GM takes any request and
        # forwards it), so none answers with a standby's tcl-leader; the tour only orders the
        # GMs, the last that answered first, each once.
        error: grpc.RpcError | None = None
        for address in MasterTour((self.address, *self.addresses)):
            self.address = address
            try:
                return getattr(self.stub(address), method)(request, timeout=self.timeout_s, metadata=self.metadata)
            except grpc.RpcError as e:
                if e.code() not in _MOVE_ON:
                    raise
                error = e
        assert error is not None
        raise error

    def each(self, method: str, request: Any) -> list[tuple[str, Any | grpc.RpcError]]:
        out: list[tuple[str, Any | grpc.RpcError]] = []
        for address in self.addresses:
            try:
                out.append((address, getattr(self.stub(address), method)(request, timeout=self.timeout_s,
                                                                          metadata=self.metadata)))
            except grpc.RpcError as e:
                out.append((address, e))
        return out


def user_metadata(addresses: tuple[str, ...], tls: bool) -> tuple[tuple[str, str], ...]:
    """The user's token for a secure GM (issue 35): $TCL_TOKEN, else the one `tcl login`
    stored for the default master (a token of the LMs' users). Sent only over TLS or to
    loopback GMs, never in clear text across a network."""
    from tcluster.cli.credentials import TOKEN_ENV, credentials_for, default_master, host_is_loopback
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        try:
            token = credentials_for(default_master()).token
        except (InvalidArgument, OSError, ValueError):
            token = ""
    if not token or not (tls or all(host_is_loopback(a) for a in addresses)):
        return ()
    return (("authorization", f"Bearer {token}"),)


def addresses_of(text: str, command: str) -> tuple[str, ...]:
    if not text.strip():
        raise InvalidArgument("--federation", f"`tcl {command}` needs the global managers: "
                              "--federation GM:PORT[,GM:PORT...] or $TCL_FEDERATION")
    return parse_addresses(text, "--federation")


def tls_of(directory: str) -> grpc.ChannelCredentials | None:
    """--federation-tls DIR: ca.pem (required) verifies the GMs; cert.pem and key.pem, both
    or neither, are the user's own certificate for GMs that ask for one (--client-ca)."""
    if not directory:
        return None
    folder = Path(directory)

    def read(name: str) -> bytes | None:
        try:
            return (folder / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise InvalidArgument("--federation-tls", f"cannot read {folder / name}: {e.strerror}") from None
    ca, cert, key = read("ca.pem"), read("cert.pem"), read("key.pem")
    if ca is None:
        raise InvalidArgument("--federation-tls", f"{folder / 'ca.pem'} is missing: the CA that signed the GMs' "
                                                  "certificates (tcl-gm --tls-cert) must be there")
    if (cert is None) != (key is None):
        present, absent = ("cert.pem", "key.pem") if key is None else ("key.pem", "cert.pem")
        raise InvalidArgument("--federation-tls", f"{folder} has {present} but no {absent}: give both or neither")
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def run(args: argparse.Namespace, handler: Callable[[argparse.Namespace, GMClient], int]) -> int:
    """cli/main.py's entry for every federation command; its InvalidArgument means exit 2."""
    client = GMClient(addresses_of(args.federation, args.command_name),
                      tls=tls_of(getattr(args, "federation_tls", "")))
    with client:
        try:
            return handler(args, client)
        except grpc.RpcError as e:
            print(f"error: GM {client.address}: {e.details() or e.code().name} ({e.code().name})", file=sys.stderr)
            return EXIT_FAILURE


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def unsupported_submit_flags(args: argparse.Namespace) -> list[str]:
    """The `tcl submit` flags given that a federated job cannot carry."""
    from tcluster.cli.submitflags import add_submit_options
    probe = argparse.ArgumentParser(add_help=False)
    add_submit_options(probe)
    given = []
    for action in probe._actions:
        if action.dest in SUBMIT_SUPPORTED or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value not in (None, False, [], action.default):
            given.append(max(action.option_strings, key=len))
    return given


def federated_spec(args: argparse.Namespace) -> Any:
    """The JobSpec message of `tcl --federation submit`; InvalidArgument on a usage error."""
    from tcluster.cli.scriptjob import is_script_submit
    if is_script_submit(args):
        raise InvalidArgument(args.command[0], "a federated job runs a command given after --, not a job script; "
                              "submit the script to a master without --federation")
    given = unsupported_submit_flags(args)
    if given:
        raise InvalidArgument(given[0], "a federated job does not support it (a federated job takes "
                              "--name --queue --tasks --array --cpu --mem --resources --constraint --env --export --time-limit "
                              "--stdout-file --stderr-file --retries --request-id and the command after --); drop it, or submit to a master without --federation")
    for c in args.constraint or ():
        key, sep, _ = c.partition("=")
        if not sep or not key or key.endswith(("!", "<", ">")):
            raise InvalidArgument("--constraint", f"{c!r}: a federation places by key=value labels only")
    from dataclasses import replace

    from tcluster.cli.spec import submission_spec
    from tcluster.wire.protobuf import spec_to_pb
    # No submit directory: another cluster does not share it (issue 34); no exported variables
    # unless --export names them (issue 35), as this shell's environment means nothing there.
    spec = submission_spec(args, environ=os.environ if args.export else {}, cwd="")
    return spec_to_pb(replace(spec, request_id=spec.request_id or uuid.uuid4().hex))


def submit(args: argparse.Namespace, client: GMClient) -> int:
    job = client.call("Submit", fpb.FedSubmitRequest(spec=federated_spec(args)))
    if args.output == "json":
        print_json(job_json(job))
    else:
        print(job.id)
    return EXIT_OK


def status(args: argparse.Namespace, client: GMClient) -> int:
    job = client.call("Get", fpb.FedGetRequest(id=args.job_id))
    print(json.dumps(job_json(job), indent=2) if args.output == "json" else job_view(job, time.time()))
    return EXIT_OK


def cancel(args: argparse.Namespace, client: GMClient) -> int:
    """Each federated job named is cancelled whole (the filters of a cluster's `tcl cancel`
    are not the federation's: refused, naming them)."""
    if args.tasks:
        raise InvalidArgument("--tasks", "a federated job is cancelled whole; drop --tasks")
    unused = [flag for flag in ("user", "state", "name", "queue") if getattr(args, flag, None)]
    if unused or not args.job_ids:
        raise InvalidArgument(f"--{unused[0]}" if unused else "ID",
                              "with --federation, name the jobs to cancel by id (filters are a cluster's)")
    for job_id in args.job_ids:
        job = client.call("Cancel", fpb.FedCancelRequest(id=job_id))
        if args.output == "json":
            print_json(job_json(job))
        else:
            running = sum(t.state in ("RUNNING", "PLACING") for t in job.tasks)
            head = f"{job_id}: " if len(args.job_ids) > 1 else ""
            print(head + job.state + (f" ({running} tasks being cancelled at their LMs)" if running else ""))
    return EXIT_OK


def pages(client: GMClient, address: str, queue: str, limit: int, every: bool) -> tuple[list[fpb.FedJob], bool]:
    """One GM's jobs, newest first: its first page, or all of them; and whether more were left."""
    jobs: list[fpb.FedJob] = []
    token = ""
    while True:
        page = client.stub(address).List(fpb.FedListRequest(queue=queue, limit=limit, page_token=token),
                                         timeout=client.timeout_s)
        jobs.extend(page.jobs)
        token = page.next_page_token
        if not token or not every:
            return jobs, bool(token)


def list_jobs(args: argparse.Namespace, client: GMClient) -> int:
    listed: dict[str, fpb.FedJob] = {}
    more, answered, last_error = False, 0, None
    for address in client.addresses:
        try:
            jobs, left = pages(client, address, args.queue or "", args.limit, args.all)
        except grpc.RpcError as e:
            if e.code() not in _MOVE_ON:
                client.address = address
                raise
            print(f"warning: GM {address} did not answer ({e.code().name}); its jobs are not listed", file=sys.stderr)
            last_error = e
            continue
        answered += 1
        more = more or left
        listed.update((j.id, j) for j in jobs)
    if not answered and last_error is not None:
        raise last_error
    jobs = sorted(listed.values(), key=lambda j: j.submitted_at, reverse=True)
    if not args.all and len(jobs) > args.limit:       # each GM's first page: the newest of them all
        jobs, more = jobs[:args.limit], True
    if args.output == "json":
        print_json([job_json(j) for j in jobs])
    else:
        print(jobs_table(jobs, time.time()))
    if more:
        print(f"(the newest {len(jobs)} jobs; --all for every one, --limit N for more)", file=sys.stderr)
    return EXIT_OK


def federation_status(args: argparse.Namespace, client: GMClient) -> int:
    answers = [(a, r if isinstance(r, fpb.FedStatus) else None) for a, r in client.each("Status", fpb.FedStatusRequest())]
    doc = status_json(answers)
    print(json.dumps(doc, indent=2) if args.output == "json" else status_tables(doc))
    if all(r is None for _, r in answers):
        print(f"error: no GM answered ({', '.join(client.addresses)})", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


__all__ = ["GMClient", "cancel", "federation_status", "list_jobs", "run", "status", "submit"]
