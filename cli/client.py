"""The master connection: one channel, both stubs, and the gRPC-error -> exit-code table."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, TypeVar

import grpc

from tcluster.wire.channels import KEEPALIVE_OPTIONS
from tcluster.cli.credentials import MASTER_NAME, Credentials, credentials_for, pinned_ca
from tcluster.cli.leader import (
    FIRST_BACKOFF_S, MAX_BACKOFF_S, LeaderFinder, NoLeaderError, error_details, is_transport_failure,
)
from tcluster.cli.options import DEFAULT_WAIT_LEADER_S, EXIT_FAILURE
from tcluster.daemonkit.leaders import check_address, join_addresses, parse_addresses
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

T = TypeVar("T")
# Unary calls are quick reads/writes on the master; a hung master should not hang scripts.
UNARY_TIMEOUT_SECONDS = 10.0

_UNREACHABLE = "cannot reach the master at {master} (is tcl-master running? set --master or TCL_MASTER)"
_TLS_FAILED = ("the TLS handshake with the master at {master} failed ({details}); check the cluster CA "
               "(TCL_CA, or `tcl login --master {master}` again)")
_TLS_WORDS = re.compile(r"ssl|tls|handshake|certificate", re.IGNORECASE)
# The one table: status from the master (or the transport) -> (exit code, message).
# Every error from the master exits 1 (usage errors, exit 2, are caught before any call);
# statuses not listed print the master's own details, which name the problem.
_DEFAULT_OUTCOME = (EXIT_FAILURE, "{details}")
_STATUS_OUTCOMES: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.UNAVAILABLE: (EXIT_FAILURE, _UNREACHABLE),
    grpc.StatusCode.DEADLINE_EXCEEDED: (EXIT_FAILURE, "the master at {master} did not answer within {timeout:g}s"),
    grpc.StatusCode.UNIMPLEMENTED: (
        EXIT_FAILURE, "the master at {master} does not support this call (version mismatch?): {details}",
    ),
    grpc.StatusCode.CANCELLED: (EXIT_FAILURE, "the call to the master at {master} was cancelled: {details}"),
    grpc.StatusCode.UNAUTHENTICATED: (EXIT_FAILURE, "the master at {master} does not know you: {details}"),
    grpc.StatusCode.PERMISSION_DENIED: (EXIT_FAILURE, "permission denied: {details}"),
}


def check_master_address(address: str) -> str:
    """HOST:PORT (or [v6]:PORT, or a gRPC `unix:` target); raises InvalidArgument."""
    return check_address(address, "--master")


def check_master_list(text: str) -> str:
    """One master or a comma-separated list (HA); each entry checked, the bad one named."""
    return join_addresses(parse_addresses(text, "--master"))


def rpc_status(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """(code, details); errors raised by stubs are also grpc.Call objects that carry both."""
    return error_details(error)


def is_unreachable(error: grpc.RpcError) -> bool:
    """True when no master could be reached, or none leads (worth retrying while waiting)."""
    return isinstance(error, NoLeaderError) or is_transport_failure(error)


def explain_rpc_error(error: grpc.RpcError, master: str, timeout: float = UNARY_TIMEOUT_SECONDS) -> tuple[int, str]:
    """(exit code, one-line message for stderr) for an error from a call to the master."""
    code, details = rpc_status(error)
    exit_code, template = _STATUS_OUTCOMES.get(code, _DEFAULT_OUTCOME)
    if code == grpc.StatusCode.UNAVAILABLE and not is_transport_failure(error):
        exit_code, template = _DEFAULT_OUTCOME  # the master answered: show what it said
    elif code == grpc.StatusCode.UNAVAILABLE and _TLS_WORDS.search(details):
        template = _TLS_FAILED                  # it runs, but TLS failed: "is it running?" would mislead
    return exit_code, "error: " + template.format(master=master, timeout=timeout, details=details)


CONNECT_TIMEOUT_SECONDS = 3.0
_UNSETTLED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class SubmitOutcomeUnknown(grpc.RpcError):
    """A submit none of whose tries got an answer that settles it: the job may exist. The
    same request id sent again returns it if it does (the error is the last try's)."""

    def __init__(self, error: grpc.RpcError, request_id: str) -> None:
        super().__init__()
        self.error = error
        self.request_id = request_id

    def code(self) -> grpc.StatusCode:
        return error_details(self.error)[0]

    def details(self) -> str:
        return error_details(self.error)[1]


class _NotAnswering(grpc.RpcError):
    """A master that took the TCP connection but did not complete gRPC's handshake."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:   # "failed to connect": a transport failure, tried elsewhere
        return f"failed to connect: {self.address} did not complete the handshake within {CONNECT_TIMEOUT_SECONDS:g}s"


def _settles(channel: grpc.Channel, timeout_s: float) -> bool:
    """True once the channel is READY, or has failed to connect (refused: the call then
    fails at once, as a transport failure); False if it still hangs in the handshake."""
    settled = threading.Event()

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                     grpc.ChannelConnectivity.SHUTDOWN):
            settled.set()
    channel.subscribe(watch, try_to_connect=True)
    try:
        return settled.wait(timeout_s)
    finally:
        channel.unsubscribe(watch)


def _wait_poller_done(channel: grpc.Channel, timeout_s: float = 0.5) -> None:
    """grpc's connectivity poller (started by subscribe in _settles) runs on for up to
    0.2 s after the last unsubscribe; closing the channel under it raises "Channel closed!"
    in that thread. Wait for it to notice (private state: skipped if grpc changes it)."""
    state = getattr(channel, "_connectivity_state", None)
    deadline = time.monotonic() + timeout_s
    while getattr(state, "polling", False) and time.monotonic() < deadline:
        time.sleep(0.02)


@dataclass(frozen=True)
class _Connection:
    channel: grpc.Channel
    jobs: jobs_pb2_grpc.JobServiceStub
    cluster: jobs_pb2_grpc.ClusterServiceStub


@dataclass
class MasterClient:
    """Typed calls to the master's JobService and ClusterService.

    `master` is one address or a comma-separated list (HA): every call goes to the leader,
    found as cli/leader.py says; one channel per address tried, all closed on exit."""

    master: str
    timeout: float = UNARY_TIMEOUT_SECONDS
    credentials: Credentials | None = None     # None: from the environment and `tcl login`
    wait_leader_s: float = DEFAULT_WAIT_LEADER_S
    _connections: dict[str, _Connection] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # One cluster, one CA and one token: the same credentials serve every master in it.
        creds = self.credentials if self.credentials is not None else credentials_for(self.master)
        creds = pinned_ca(self.master, creds)      # a token alone: its CA, fetched by the pin (or CaUnavailable)
        self._creds = creds
        self._metadata = creds.metadata
        self._finder = LeaderFinder(parse_addresses(self.master, "--master"), self.wait_leader_s)

    @property
    def address(self) -> str:
        """The master this client talks to: the leader, once a call found it."""
        return self._finder.current

    def _connection(self, address: str) -> _Connection:
        # Keepalive pings (tcluster/wire/channels.py): `tcl logs -f` on a quiet task receives nothing for
        # as long as the task prints nothing, so a master whose host died or was cut off held
        # it forever; the pings end it with an error within about 15 s.
        if address not in self._connections:
            if self._creds.ca_pem:      # the cluster CA is the only root; every master's cert names the role
                channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(self._creds.ca_pem),
                                              options=[*KEEPALIVE_OPTIONS, ("grpc.ssl_target_name_override", MASTER_NAME)])
            else:
                channel = grpc.insecure_channel(address, options=list(KEEPALIVE_OPTIONS))
            self._connections[address] = _Connection(channel, jobs_pb2_grpc.JobServiceStub(channel),
                                                     jobs_pb2_grpc.ClusterServiceStub(channel))
        return self._connections[address]

    def _call(self, call: Callable[[_Connection], T]) -> T:
        return self._finder.call(lambda address: call(self._ready(address)))

    def _ready(self, address: str) -> _Connection:
        """With several masters, one that accepts TCP but never answers (a paused or hung
        process) is passed over after CONNECT_TIMEOUT_S, before anything was sent to it, so
        even a submit may go on to the next; with one master, the call's own timeout rules."""
        connection = self._connection(address)
        if len(self._finder.masters) > 1 and not _settles(connection.channel, CONNECT_TIMEOUT_SECONDS):
            raise _NotAnswering(address)
        return connection

    def __enter__(self) -> MasterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for connection in self._connections.values():
            _wait_poller_done(connection.channel)
            connection.channel.close()

    def submit(self, spec: jobs_pb2.JobSpec, on_retry: Callable[[str], None] | None = None) -> jobs_pb2.Job:
        """With spec.request_id, a Submit whose outcome is unknown (the reply lost with a
        dying or hung leader, a store write not confirmed) is sent again, for up to
        wait_leader_s: the master answers a repeat with the job the first one made."""
        def send(c: _Connection) -> jobs_pb2.Job:
            return c.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=self.timeout, metadata=self._metadata)
        if not spec.request_id:
            return self._call(send)
        started, backoff, unknown = time.monotonic(), FIRST_BACKOFF_S, False
        while True:
            try:
                return self._call(send)
            except grpc.RpcError as error:
                unknown |= self.outcome_unknown(error)
                left = self.wait_leader_s - (time.monotonic() - started)
                # once unknown, stays unknown: a later refusal or "no leader" settles nothing
                if not unknown or left <= 0 or error_details(error)[0] not in _UNSETTLED:
                    if unknown:
                        raise SubmitOutcomeUnknown(error, spec.request_id) from error
                    raise
                if on_retry is not None and backoff == FIRST_BACKOFF_S:    # once per command, not per try
                    on_retry(f"submit: {error_details(error)[1][:200]}; sending it again with request id "
                             f"{spec.request_id} for up to {self.wait_leader_s:g}s")
                time.sleep(min(backoff, left))
                backoff = min(2 * backoff, MAX_BACKOFF_S)

    def outcome_unknown(self, error: grpc.RpcError) -> bool:
        """The call may or may not have been carried out: no answer in time, or a master
        that could not confirm its write or lost its leadership meanwhile. Not: no master
        found at all (NoLeaderError, it waited already), nor one lone master refusing
        connections (nothing was sent; fail at once as before HA)."""
        code, details = error_details(error)
        if isinstance(error, NoLeaderError) or code not in _UNSETTLED:
            return False
        never_sent = is_transport_failure(error) and "socket closed" not in details.lower()
        return not (never_sent and len(self._finder.masters) == 1)

    def get(self, job_id: str, watch_usage_s: float = 0.0) -> jobs_pb2.Job:
        request = jobs_pb2.GetJobRequest(id=job_id, watch_usage_s=watch_usage_s)
        return self._call(lambda c: c.jobs.Get(request, timeout=self.timeout, metadata=self._metadata))

    def all_tasks(self, job_id: str) -> list[jobs_pb2.Task]:
        """Every task row of a job, paged through GetJobTasks (a big job's Get shows ranges)."""
        rows: list[jobs_pb2.Task] = []
        start = 0
        while True:
            request = jobs_pb2.JobTasksPageRequest(id=job_id, start_index=start)
            page = self._call(lambda c: c.jobs.GetJobTasks(request, timeout=self.timeout, metadata=self._metadata))
            rows += page.tasks
            if not page.more:
                return rows
            start = page.next_start_index

    def list_jobs(self, states: Iterable[int], queue: str, limit: int, all_jobs: bool = False, owner: str = "",
                  watch_usage_s: float = 0.0) -> tuple[list[jobs_pb2.Job], int]:
        """(jobs, how many match in all); with all_jobs, page through every one. watch_usage_s:
        the listed jobs' nodes send fresh usage samples for that long (tcl top)."""
        request = jobs_pb2.ListJobsRequest(states=list(states), queue=queue, limit=limit if not all_jobs else 1000,
                                           owner=owner, watch_usage_s=watch_usage_s)
        jobs: list[jobs_pb2.Job] = []
        while True:
            reply = self._call(lambda c: c.jobs.List(request, timeout=self.timeout, metadata=self._metadata))
            jobs += reply.jobs
            if not all_jobs or not reply.next_page_token:
                return jobs, reply.total
            request.page_token = reply.next_page_token

    def cancel(self, job_id: str, tasks: str = "") -> jobs_pb2.Job:
        return self._call(lambda c: c.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job_id, tasks=tasks),
                                                  timeout=self.timeout, metadata=self._metadata))

    def update(self, job_id: str, throttle: int | None = None) -> jobs_pb2.Job:
        request = jobs_pb2.UpdateJobRequest(id=job_id)
        if throttle is not None:
            request.throttle = throttle
        return self._call(lambda c: c.jobs.Update(request, timeout=self.timeout, metadata=self._metadata))

    def job_verb(self, verb: str, request: object) -> jobs_pb2.Job:
        """Hold, Release, Requeue or Update (cli/lifecycle.py): one job's change, answered with the job."""
        return self._call(lambda c: getattr(c.jobs, verb)(request, timeout=self.timeout, metadata=self._metadata))

    def logs(self, request: jobs_pb2.LogsRequest) -> Iterator[jobs_pb2.LogChunk]:
        """The leader is found when the stream opens: a standby's refusal comes with the first read."""
        def open_stream(c: _Connection) -> tuple[Iterator[jobs_pb2.LogChunk], jobs_pb2.LogChunk | None]:
            # No deadline: a large log may take longer than any fixed bound to stream.
            stream = c.jobs.Logs(request, metadata=self._metadata)
            return stream, next(stream, None)
        stream, first = self._call(open_stream)
        if first is not None:
            yield first
            yield from stream

    def exec_stream(self, requests: Iterable[jobs_pb2.ExecRequest]) -> tuple[Any, jobs_pb2.ExecReply | None]:
        """The Exec stream and its first reply (no deadline: an interactive shell lasts as
        long as its user). The leader is found with the first reply, as for logs; each
        attempt iterates `requests` anew."""
        def open_stream(c: _Connection) -> tuple[Any, jobs_pb2.ExecReply | None]:
            stream = c.jobs.Exec(iter(requests), metadata=self._metadata)
            return stream, next(stream, None)
        return self._call(open_stream)

    def report(self, request: jobs_pb2.ReportRequest) -> jobs_pb2.ReportResponse:
        return self._call(lambda c: c.jobs.Report(request, timeout=self.timeout, metadata=self._metadata))

    def history(self, request: jobs_pb2.HistoryRequest) -> jobs_pb2.HistoryResponse:
        return self._call(lambda c: c.jobs.History(request, timeout=self.timeout, metadata=self._metadata))

    def whoami(self) -> jobs_pb2.WhoAmIResponse:
        return self._call(lambda c: c.cluster.WhoAmI(jobs_pb2.WhoAmIRequest(), timeout=self.timeout,
                                                     metadata=self._metadata))

    def list_queues(self) -> jobs_pb2.ListQueuesResponse:
        return self._call(lambda c: c.cluster.ListQueues(jobs_pb2.ListQueuesRequest(), timeout=self.timeout,
                                                         metadata=self._metadata))

    def operate_nodes(self, request: jobs_pb2.OperateNodesRequest) -> jobs_pb2.OperateNodesResponse:
        """cordon, uncordon, drain, maint: the same request again changes nothing more."""
        return self._call(lambda c: c.cluster.OperateNodes(request, timeout=self.timeout, metadata=self._metadata))

    def list_nodes(self) -> list[jobs_pb2.Node]:
        return list(self.nodes_response().nodes)

    def nodes_response(self) -> jobs_pb2.ListNodesResponse:
        """The nodes, the placement policy in force and (lotes) its plan status."""
        return self._call(lambda c: c.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=self.timeout,
                                                        metadata=self._metadata))
