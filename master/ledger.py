"""The usage ledger as the service offers it (README, "Usage ledger"): reports and history
read off the event loop, who sees which rows, and retention. The rows are made by the core
(master/core/ledgerrows.py) and written by the store with the ends they record; this
module only reads them, prunes old ones, and (etcd) copies etcd's hourly sums into the
local file when this master starts leading.

Who sees what: an admin every row; any other user only their own (`tcl report` sums the
caller's rows, `tcl history --user OTHER` is refused), whatever --status-visibility says
of job status: usage is what quotas and bills are made of."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tcluster.domain.errors import InvalidArgument, PermissionDenied
from tcluster.domain.ledger import REPORT_KEYS, LedgerRow, ReportLine, Rollup
from tcluster.domain.when import check_period
from tcluster.master.usage.ledgerdb import LedgerFile
from tcluster.security.authz import Caller

log = logging.getLogger(__name__)
PRUNE_EVERY_S = 3600.0
HISTORY_LIMIT = 1000
# Replies stay within the message bound (4 MiB, wire/channels.py) at the largest row and
# line: a history row is at most LEDGER_ROW_BYTES (1,260), a report line a name (253) and six
# numbers. `--by job` over months could name millions of jobs; users and queues are fewer.
HISTORY_MAX = 3_000
REPORT_MAX_LINES = 10_000
STATES = ("SUCCEEDED", "FAILED", "KILLED", "LOST", "PREEMPTED", "REQUEUED")


@dataclass(frozen=True)
class Report:
    lines: list[ReportLine]
    since: float
    until: float
    by: str
    own_only: bool


class UsageLedger:
    def __init__(self, path: Path, retention_s: float, clock: Callable[[], float], store: Any = None) -> None:
        self.file = LedgerFile(path)
        self.retention_s = retention_s
        self.clock = clock
        self.store = store              # EtcdStore: its hourly sums (None with SQLite)
        self._pruner: asyncio.Task[None] | None = None
        self._etcd_hours: list[Rollup] = []
        if store is not None and hasattr(store, "ledger_hours"):
            store.ledger = self.file
            self._etcd_hours = store.ledger_hours()        # the hours other masters led: copied by start()

    def start(self) -> None:
        """Copies etcd's hourly sums into the file off the loop, then prunes now and hourly;
        without a running loop (a test's service) the copy is made at once."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.file.set_hours(self._etcd_hours)
            return
        self._pruner = loop.create_task(self._prune_loop(), name="ledger-retention")

    def close(self) -> None:
        if self._pruner is not None:
            self._pruner.cancel()
        self.file.close()

    async def prune(self) -> int:
        before = self.clock() - self.retention_s
        gone = await asyncio.to_thread(self.file.prune, before)
        if self.store is not None and hasattr(self.store, "forget_ledger_hours"):
            await self.store.forget_ledger_hours(before)
        return gone

    async def _prune_loop(self) -> None:
        hours, self._etcd_hours = self._etcd_hours, []
        if hours:
            await asyncio.to_thread(self.file.set_hours, hours)
        while True:
            try:
                gone = await self.prune()
                if gone:
                    log.info("usage ledger: %d rows older than --ledger-retention forgotten", gone)
            except Exception as error:   # noqa: BLE001 - retried next period; the rows are kept meanwhile
                log.warning("usage ledger retention not applied (%s); retried in %.0fs", error, PRUNE_EVERY_S)
            await asyncio.sleep(PRUNE_EVERY_S)

    async def report(self, caller: Caller, since: float, until: float, by: str) -> Report:
        if by not in REPORT_KEYS:
            raise InvalidArgument("by", f"{by[:40]!r} is not one of {', '.join(REPORT_KEYS)}")
        until = until or self.clock()
        check_period(since, until)
        own = "" if caller.admin else caller.name
        lines = await asyncio.to_thread(self.file.report, since, until, by, own)
        if len(lines) > REPORT_MAX_LINES:
            raise InvalidArgument("since", f"the period holds {len(lines)} {by}s, more than a report shows "
                                           f"({REPORT_MAX_LINES}): give a shorter --since/--until, or --by user|queue")
        return Report(lines, since, until, by, bool(own))

    async def history(self, caller: Caller, user: str, since: float, until: float, states: list[str],
                      limit: int) -> list[LedgerRow]:
        if user and user != caller.name and not caller.admin:
            raise PermissionDenied(f"user {caller.name} may not read the usage of {user}: a user reads their own "
                                   "rows, an admin every user's")
        bad = [s for s in states if s.upper() not in STATES]
        if bad:
            raise InvalidArgument("state", f"{bad[0][:40]!r} is not one of {', '.join(STATES)}")
        if not 0 <= limit <= HISTORY_MAX:
            raise InvalidArgument("limit", f"{limit} is not within 0..{HISTORY_MAX} (0: {HISTORY_LIMIT})")
        until = until or self.clock()
        check_period(since, until)
        who = user if caller.admin else caller.name
        return await asyncio.to_thread(self.file.history, since, until, who, [s.upper() for s in states],
                                       limit or HISTORY_LIMIT)

    async def attempt_node(self, job_id: str, index: int, attempt: int) -> str:
        """The node that ran a task's finished attempt ("" when no row is kept for it): each
        attempt's logs stay on the node that ran it (`tcl logs --attempt N`)."""
        def read() -> str:
            with self.file._open() as db:
                row = db.execute("SELECT node FROM ledger WHERE job_id = ? AND idx = ? AND attempt = ?",
                                 (job_id, index, attempt)).fetchone()
            return str(row[0]) if row else ""
        return await asyncio.to_thread(read)


def ledger_path(data_dir: Path, db_path: Path, etcd: bool) -> Path:
    """With SQLite, the state database itself (the rows are written with the ends); with
    etcd, a file of this master's own."""
    return data_dir / "ledger.db" if etcd else db_path
