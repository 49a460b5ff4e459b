"""The one interface to the master's durable state, and the choice of its backend.

`sqlite:PATH` (master/store/sqlite.py) is the embedded default, one master; `etcd://H:P,...`
(master/store/etcd.py) keeps the state in etcd so that several masters can take turns
leading (docs/ha.md); the URL itself is parsed in tcluster/etcd/url.py. The scheduling core and
the service see only `StateStore`."""

from __future__ import annotations

from typing import Protocol

from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.events import KillIntent, Step
from tcluster.domain.model import Job, Node, Task


class StoreRefused(InvalidArgument):
    """The store refused one step's rows as they are (too large for it): that step was not
    made, and sending it again will not help. Other steps of the same batch are unaffected."""

    def __init__(self, message: str) -> None:
        super().__init__("", f"the store refused this change: {message}")


class StateStore(Protocol):
    async def commit(self, steps: list[tuple[Step, list[str]]]) -> list[Exception | None]:
        """Writes the steps' rows, in order, and answers for each: None (durable), or the
        error that says whether it was not made (StoreRefused, StoreError) or may have been
        (StoreError, NotLeader: etcd did not report the outcome). Raises when nothing was
        written (StoreError, NotLeader)."""

    def close(self) -> None: ...
    def job_exists(self, job_id: str) -> bool: ...
    def load_jobs(self, finished_limit: int | None = None, finished_tasks: int | None = None) -> list[Job]: ...
    def load_tasks(self, job_ids: set[str] | None = None) -> list[Task]: ...
    def load_job(self, job_id: str) -> tuple[Job, list[Task]] | None: ...
    def load_job_record(self, job_id: str) -> Job | None:
        """The job without its task rows (a dependency needs its state and owner only)."""
    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]: ...
    def load_nodes(self) -> list[Node]: ...
    def load_kills(self) -> list[KillIntent]: ...
    def load_decayed_usage(self) -> bytes | None: ...
