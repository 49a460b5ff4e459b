"""The master connection: one channel, both stubs, and the gRPC-error -> exit-code table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

import grpc

from tcluster.cli.credentials import DEFAULT_MASTER, MASTER_ENV, MASTER_NAME, Credentials, credentials_for
from tcluster.cli.credentials import default_master as default_master
from tcluster.errors import InvalidArgument
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

# Unary calls are quick reads/writes on the master; a hung master should not hang scripts.
UNARY_TIMEOUT_SECONDS = 10.0

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

_UNREACHABLE = "cannot reach the master at {master} (is tcl-master running? set --master or TCL_MASTER)"
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
# gRPC's own wording when no connection was made at all. An UNAVAILABLE the master sends
# on purpose (e.g. an agent it must reach is down) carries its own details instead.
_TRANSPORT_FAILURE = re.compile(
    r"failed to connect|connection refused|resolving|resolution|lookup|socket closed"
    r"|connections to all backends failing|no route to host|connect failed|handshake",
    re.IGNORECASE,
)
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


def check_master_address(address: str) -> str:
    """HOST:PORT (or [v6]:PORT, or a gRPC `unix:` target); raises InvalidArgument."""
    if address.startswith("unix:"):
        return address
    match = _HOST_PORT.match(address.strip())
    if not match or not 0 < int(match.group(2)) < 65536:
        raise InvalidArgument("--master", f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:7070)")
    return address.strip()


def rpc_status(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """(code, details); errors raised by stubs are also grpc.Call objects that carry both."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.Call) else ""
    return code, details or code.name


def is_unreachable(error: grpc.RpcError) -> bool:
    """True when the master could not be reached at all (worth retrying while waiting)."""
    code, details = rpc_status(error)
    return code == grpc.StatusCode.UNAVAILABLE and bool(_TRANSPORT_FAILURE.search(details))


def explain_rpc_error(error: grpc.RpcError, master: str, timeout: float = UNARY_TIMEOUT_SECONDS) -> tuple[int, str]:
    """(exit code, one-line message for stderr) for an error from a call to the master."""
    code, details = rpc_status(error)
    exit_code, template = _STATUS_OUTCOMES.get(code, _DEFAULT_OUTCOME)
    if code == grpc.StatusCode.UNAVAILABLE and not is_unreachable(error):
        exit_code, template = _DEFAULT_OUTCOME  # the master answered: show what it said
    return exit_code, "error: " + template.format(master=master, timeout=timeout, details=details)


@dataclass
class MasterClient:
    """Typed calls to the master's JobService and ClusterService."""

    master: str
    timeout: float = UNARY_TIMEOUT_SECONDS
    credentials: Credentials | None = None     # None: from the environment and `tcl login`

    def __post_init__(self) -> None:
        creds = self.credentials if self.credentials is not None else credentials_for(self.master)
        self._metadata = creds.metadata
        if creds.ca_pem:      # the cluster CA is the only root; every master's cert names the role
            self._channel = grpc.secure_channel(self.master, grpc.ssl_channel_credentials(creds.ca_pem),
                                                options=[("grpc.ssl_target_name_override", MASTER_NAME)])
        else:
            self._channel = grpc.insecure_channel(self.master)
        self._jobs = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = jobs_pb2_grpc.ClusterServiceStub(self._channel)

    def __enter__(self) -> MasterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._channel.close()

    def submit(self, spec: jobs_pb2.JobSpec) -> jobs_pb2.Job:
        return self._jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=self.timeout, metadata=self._metadata)

    def get(self, job_id: str) -> jobs_pb2.Job:
        return self._jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=self.timeout, metadata=self._metadata)

    def list_jobs(self, states: Iterable[int], queue: str, limit: int, all_jobs: bool = False, owner: str = ""
                  ) -> tuple[list[jobs_pb2.Job], int]:
        """(jobs, how many match in all); with all_jobs, page through every one."""
        request = jobs_pb2.ListJobsRequest(states=list(states), queue=queue, limit=limit if not all_jobs else 1000,
                                           owner=owner)
        jobs: list[jobs_pb2.Job] = []
        while True:
            reply = self._jobs.List(request, timeout=self.timeout, metadata=self._metadata)
            jobs += reply.jobs
            if not all_jobs or not reply.next_page_token:
                return jobs, reply.total
            request.page_token = reply.next_page_token

    def cancel(self, job_id: str) -> jobs_pb2.Job:
        return self._jobs.Cancel(jobs_pb2.CancelJobRequest(id=job_id), timeout=self.timeout, metadata=self._metadata)

    def logs(self, request: jobs_pb2.LogsRequest) -> Iterator[jobs_pb2.LogChunk]:
        # No deadline: a large log may take longer than any fixed bound to stream.
        return self._jobs.Logs(request, metadata=self._metadata)

    def whoami(self) -> jobs_pb2.WhoAmIResponse:
        return self._cluster.WhoAmI(jobs_pb2.WhoAmIRequest(), timeout=self.timeout, metadata=self._metadata)

    def list_queues(self) -> jobs_pb2.ListQueuesResponse:
        return self._cluster.ListQueues(jobs_pb2.ListQueuesRequest(), timeout=self.timeout, metadata=self._metadata)

    def list_nodes(self) -> list[jobs_pb2.Node]:
        return list(self.nodes_response().nodes)

    def nodes_response(self) -> jobs_pb2.ListNodesResponse:
        """The nodes, the placement policy in force and (lotes) its plan status."""
        return self._cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=self.timeout, metadata=self._metadata)
