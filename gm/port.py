"""What tcl-gm's helpers see of the daemon (gm/daemon.py), as Protocols: the Placer and the
Canceller (GMPort), and GlobalManagerService (ServicePort). They hold one of these instead
of the whole GMDaemon, so that no helper module imports the daemon and the daemon's private
state stays its own; GMDaemon is the one implementation."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import grpc

from tcluster.federation.gm import GlobalManager, Pending
from tcluster.gm.links import LMLink
from tcluster.gm.settings import GMSettings
from tcluster.gm.store import GMStore, TaskRow
from tcluster.gm.wire import Vocabulary
from tcluster.v1 import federation_pb2, jobs_pb2

if TYPE_CHECKING:
    from tcluster.gm.fedetcd import EtcdMembership

# (lm, request, task, queue): sent, no answer came; sent again with the same request id.
Unanswered = tuple[int, federation_pb2.PlaceRequest, Pending, str]


class GMPort(Protocol):
    """What placing and cancelling read (the pure GM, the LMs, the store, the requests to
    send again) and the few things they may ask of the daemon."""

    gm: GlobalManager
    links: list[LMLink]
    vocab: Vocabulary
    wake: asyncio.Event                  # set: the placing loop looks again at once
    unanswered: list[Unanswered]

    @property
    def store(self) -> GMStore:
        """The task store."""

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The one channel to this LM master (or GM), with its credentials."""

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The admin token's header for an LM master, when there is one."""

    def spec_of(self, job_id: str) -> jobs_pb2.JobSpec:
        """The spec of one task of the job (as sent to an LM)."""

    def age_views(self, now: float) -> None:
        """Stops placing on LMs whose last state is older than --view-max-age-s."""

    def set_usable(self, lm: int, usable: bool) -> None:
        """Whether the pure GM may place on this LM (its real view, or an empty placeholder)."""


class CancelIntents(Protocol):
    def request(self, job_id: str) -> None:
        """Persists the intent to cancel the job and ends its pending tasks."""


class ServicePort(Protocol):
    """What GlobalManagerService (gm/service.py) reads of the daemon, and asks of it."""

    s: GMSettings
    gm: GlobalManager
    links: list[LMLink]
    unanswered: list[Unanswered]
    canceller: CancelIntents
    membership: EtcdMembership | None    # with --etcd

    @property
    def store(self) -> GMStore:
        """The task store."""

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The one channel to this GM (or LM master), with its credentials."""

    def enqueue(self, row: TaskRow) -> None:
        """A pending task of a job this GM serves, into its queue."""

    def admit(self, job_id: str, pending: list[TaskRow], active: tuple[str, ...] = ()) -> None:
        """A new job's pending tasks into their queue, up to its array's throttle."""

    def owner_of(self, queue: str) -> str | None:
        """The GM serving the queue now; None: nobody (NotServing: this GM lost its lease)."""

    def peer_address(self, name: str) -> str | None:
        """Where the GM of that name listens, when known."""
