"""The master's durable state in etcd (docs/ha.md): the StateStore for `--store etcd://`.

Writes are fenced transactions (master/store/leadership.py): a batch applies only while this
master's leader key stands. etcd caps a transaction's operations (`--max-txn-ops`, 128 by
default) and its size (`--max-request-bytes`, 1.5 MiB), so a group commit goes out as
several transactions, in order (master/store/etcdplan.py): each holds whole steps, or a
part of one large step whose keys are ordered so that any prefix of them is a state a
restart handles (a job's spec and tasks before the job's own key: a reader ignores tasks
and specs whose job key is missing). So the store answers for each step: the steps of
the transactions written are durable, those of the transaction etcd refused are retried
one by one (the one etcd refuses alone fails, with etcd's reason), and those after a
write whose outcome etcd did not report are told so, never "succeeded" or "not made" by
guess. A write larger than etcd takes is refused before anything is sent.

Reads come from the Mirror (tcluster/etcd/mirror.py), in memory: a standby's warm copy is
the state the new leader starts from. A write whose outcome etcd did not report (no
quorum, a timeout) ends this master's term: it steps down and the next leader reads
what etcd holds."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable

from tcluster.wire.codec import spec_from_json, with_job_extra
from tcluster.domain.errors import Unavailable
from tcluster.master.core.events import KillIntent, Step, kill_mode
from tcluster.master.store.base import StoreRefused
from tcluster.master.store.etcdbridge import EtcdBridge
from tcluster.etcd.kv import EtcdKV, EtcdRefused, EtcdUnavailable, delete, delete_prefix, put
from tcluster.etcd.mirror import Mirror
from tcluster.master.store.etcdplan import (
    DECAYED_USAGE_KEY,
    ETCD_MAX_REQUEST_BYTES, Txn, Write, chunks, oversized, plan_txns, step_writes, touches,
)
from tcluster.master.store.etcdledger import HOURS, RollupWrites, decode, expired, held
from tcluster.master.store.etcdrecords import read_node, read_task
from tcluster.domain.ledger import Rollup
from tcluster.master.store.leadership import Leadership, NotLeader
from tcluster.master.store.sqlite import StoreError
from tcluster.domain.model import Job, JobState, Node, Task

log = logging.getLogger(__name__)
Outcome = Exception | None            # a step's: None = durable


@dataclass(frozen=True)
class JobKey:
    """What listing and purging need of a job, kept current from the copy's changes."""
    submitted_at: float
    state: str
    finished_at: float
    queue: str
    owner: str


class EtcdStore:
    # The local ledger file (master/usage/ledgerdb.LedgerFile), set by the usage ledger
    # (master/ledger.py): the detail rows of the ends etcd committed go there.
    ledger: Any = None

    def __init__(self, kv: EtcdKV, mirror: Mirror, leadership: Leadership, max_txn_ops: int = 128,
                 max_txn_bytes: int = 1_000_000, bridge: EtcdBridge | None = None,
                 max_request_bytes: int = ETCD_MAX_REQUEST_BYTES) -> None:
        self.kv, self.mirror, self.leadership = kv, mirror, leadership
        # Transactions go through the bridge's own loop when given: awaited on the master's
        # busy loop, each one waited ~45 ms for its turn at 2,000 agents (bench/results/ha-*).
        self.bridge = bridge
        self.max_txn_ops, self.max_txn_bytes = max_txn_ops, max_txn_bytes
        self.max_request_bytes = max_request_bytes
        self._index: dict[str, JobKey] = {}
        self._owners: dict[str, tuple[str, str]] = {}     # job -> (queue, owner), from its spec
        for key, raw in mirror.items("state/specs"):
            self._on_spec(key, raw, 0)
        for key, raw in mirror.items("state/jobs"):
            self._on_job(key, raw, 0)
        mirror.listen("state/specs/", self._on_spec)
        mirror.listen("state/jobs/", self._on_job)

    def _on_spec(self, relative: str, raw: bytes | None, revision: int) -> None:
        job_id = relative.rpartition("/")[2]
        if raw is None:
            self._owners.pop(job_id, None)
            return
        data = json.loads(raw)
        self._owners[job_id] = (str(data.get("queue", "default")), str(data.get("owner", "")))

    def _on_job(self, relative: str, raw: bytes | None, revision: int) -> None:
        job_id = relative.rpartition("/")[2]
        if raw is None:
            self._index.pop(job_id, None)
            return
        r = json.loads(raw)
        queue, owner = self._owners.get(job_id, ("", ""))
        self._index[job_id] = JobKey(r[1], r[0], r[2], queue, owner)

    def close(self) -> None:
        """The KV and the copy belong to the daemon (server.py), which closes them."""

    # ---- writes ----

    async def commit(self, steps: list[tuple[Step, list[str]]]) -> list[Outcome]:
        """Each step's outcome, in order (StateStore); a write etcd would refuse for its size
        is refused before anything is sent."""
        plans: list[list[Write]] = []
        outcomes: list[Outcome] = [None] * len(steps)
        rollups = RollupWrites(lambda key: self.mirror.get(key))    # read only for steps that end attempts
        for n, (step, new_jobs) in enumerate(steps):
            purge = self._purgeable(step.purge_before) if step.durable and step.purge_before else []
            plans.append(step_writes(step, set(new_jobs), purge) + rollups.of(step.ledger) if step.durable else [])
            too_big = oversized(plans[n], self.max_request_bytes)
            if too_big is not None:
                outcomes[n] = StoreRefused(f"{too_big[0].split('/')[1]} record of {too_big[1]:,} bytes; etcd takes "
                                           f"at most {self.max_request_bytes:,} per request: nothing was written")
        await self._write_steps([n for n, plan in enumerate(plans) if plan and outcomes[n] is None], plans, outcomes)
        self._record_ledger(steps, plans, outcomes)
        return outcomes

    def _record_ledger(self, steps: list[tuple[Step, list[str]]], plans: list[list[Write]],
                       outcomes: list[Outcome]) -> None:
        """The detail of the ends etcd now holds, to the local file, with etcd's sums of their
        hours. A crash before this loses detail rows only: the sums are in etcd."""
        done = [n for n, (step, _) in enumerate(steps) if step.ledger and outcomes[n] is None]
        if self.ledger is None or not done:
            return
        keys = {key for n in done for key, _ in plans[n] if key.startswith(HOURS + "/")}
        hours = [decode(key, raw) for key in sorted(keys) if (raw := self.mirror.get(key)) is not None]
        try:
            self.ledger.record([row for n in done for row in steps[n][0].ledger], hours)
        except Exception as error:   # noqa: BLE001 - the local detail is a convenience; etcd has the sums
            log.error("usage ledger detail not written locally (%s); etcd's hourly sums have it", error)

    def ledger_hours(self) -> list[Rollup]:
        """Every hourly sum etcd holds (a new leader copies them to its file)."""
        return held(self.mirror.tables(HOURS), self.mirror.items)

    async def forget_ledger_hours(self, before: float) -> int:
        """Deletes the hourly sums past the retention (the leader, now and then)."""
        keys = expired(self.mirror.tables(HOURS), self.mirror.items, before)
        for chunk in self._chunks([(key, None) for key in keys]):
            await self._write(chunk)
        return len(keys)

    async def _write_steps(self, order: list[int], plans: list[list[Write]], outcomes: list[Outcome]) -> None:
        """Writes the steps in order; a transaction etcd refuses is retried step by step,
        and a step that depends on a refused one (changes the same rows) is not written."""
        alone: set[int] = set()
        refused: set[str] = set()
        while order:
            for n in [n for n in order if touches(plans[n]) & refused]:
                outcomes[n] = Unavailable("not written: it changes the same job or node as a change the store "
                                          "refused just before it; the master reloaded its state; send it again")
            order = [n for n in order if outcomes[n] is None]
            order = await self._write_txns(plan_txns([(n, plans[n]) for n in order], self.max_txn_ops,
                                                     self.max_txn_bytes, frozenset(alone)), alone, refused, plans,
                                           outcomes)

    async def _write_txns(self, txns: list[Txn], alone: set[int], refused: set[str], plans: list[list[Write]],
                          outcomes: list[Outcome]) -> list[int]:
        """Writes until etcd refuses one: the steps still to write then (none: all done)."""
        for at, txn in enumerate(txns):
            try:
                await self._write(list(txn.writes))
            except EtcdRefused as error:
                if len(txn.steps) > 1:
                    alone.update(txn.steps)              # nothing of it applied: find whose it is
                else:
                    partly = at > 0 and txns[at - 1].steps == txn.steps and not txns[at - 1].ends
                    outcomes[txn.steps[0]] = StoreRefused(f"{error}{'; partly written' if partly else ''}")
                    refused |= touches(plans[txn.steps[0]])
                later = [n for t in txns[at:] for n in t.steps if outcomes[n] is None]
                return list(dict.fromkeys(later))
            except Unavailable as error:                 # StoreError (outcome unknown), NotLeader
                for n in txn.steps:
                    outcomes[n] = error
                for n in {n for t in txns[at + 1:] for n in t.steps} - set(txn.steps):
                    outcomes[n] = Unavailable("not written: the store failed on a change before it in the same "
                                              "batch; nothing of this one was applied; send it again")
                return []
        return []

    def _purgeable(self, before: float) -> list[str]:
        return sorted(j for j, k in self._index.items() if 0 < k.finished_at < before)

    def _chunks(self, writes: list[Write]) -> Iterable[list[Write]]:
        """Transactions within etcd's limits, in order (the writes are merged: one per key)."""
        return chunks(writes, self.max_txn_ops, self.max_txn_bytes)

    async def _write(self, chunk: list[Write]) -> None:
        self.leadership.check()
        prefix = self.mirror.prefix
        ops = [put(prefix + key, value) if value is not None else delete(prefix + key) for key, value in chunk]
        ops += self._task_deletions(chunk)
        try:
            compares = self.leadership.compares()
            result = await (self.bridge.run(lambda kv: kv.txn(compares, ops)) if self.bridge is not None
                            else self.kv.txn(compares, ops))
        except EtcdUnavailable as error:
            self.leadership.lose(f"a write's outcome is unknown ({error})")
            raise StoreError(f"the master cannot write its state: {error}. The change may still be applied "
                             "once etcd has a quorum again: check (tcl jobs) before you retry") from error
        if not result.succeeded:
            self.leadership.lose("a write was refused: this master's leader key is gone")
            raise NotLeader("this master no longer leads; retry: another master takes over")
        for key, value in chunk:
            self.mirror.apply(key, value, result.revision)
            if value is None and key.startswith("state/jobs/"):
                for task, _ in self.mirror.items("state/tasks/" + key.rpartition("/")[2]):
                    self.mirror.apply(task, None, result.revision)

    def _task_deletions(self, chunk: list[Write]) -> list:   # type: ignore[type-arg]
        """A deleted job's tasks and spec go in the same transaction, as one range each."""
        ops = []
        for key, value in chunk:
            if value is None and key.startswith("state/jobs/"):
                job_id = key.rpartition("/")[2]
                ops.append(delete_prefix(self.mirror.prefix + f"state/tasks/{job_id}/"))
                ops.append(delete(self.mirror.prefix + f"state/specs/{job_id}"))
        return ops

    # ---- reads (from the copy) ----

    def job_exists(self, job_id: str) -> bool:
        return self.mirror.get(f"state/jobs/{job_id}") is not None or job_id in self._owners

    def _job(self, job_id: str) -> Job | None:
        raw, spec = self.mirror.get(f"state/jobs/{job_id}"), self.mirror.get(f"state/specs/{job_id}")
        if raw is None or spec is None:
            return None
        r = json.loads(raw)
        return with_job_extra(Job(id=job_id, spec=spec_from_json(spec.decode()), state=JobState(r[0]),
                                  submitted_at=r[1], finished_at=r[2], cancelled=bool(r[3])), r[4] if len(r) > 4 else "")

    def load_jobs(self, finished_limit: int | None = None, finished_tasks: int | None = None) -> list[Job]:
        keys = sorted(self._index.items(), key=lambda item: (item[1].submitted_at, item[0]))
        chosen = [j for j, k in keys if k.finished_at == 0 or finished_limit is None]
        if finished_limit is not None:
            recent = sorted(((k.finished_at, j) for j, k in self._index.items() if k.finished_at > 0), reverse=True)
            budget = finished_tasks if finished_tasks is not None else float("inf")
            for _, job_id in recent[:finished_limit]:
                budget -= max(1, self.mirror.count(f"state/tasks/{job_id}"))
                if budget < 0:
                    break
                chosen.append(job_id)
        jobs = [job for job in map(self._job, chosen) if job is not None]
        return sorted(jobs, key=lambda j: (j.submitted_at, j.id))

    def load_tasks(self, job_ids: set[str] | None = None) -> list[Task]:
        ids = sorted(job_ids) if job_ids is not None else sorted(self._index)
        out = []
        for job_id in ids:
            for key, raw in self.mirror.items(f"state/tasks/{job_id}"):
                out.append(read_task(job_id, int(key.rpartition("/")[2]), raw))
        return out

    def load_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        job = self._job(job_id)
        return (job, self.load_tasks({job_id})) if job is not None else None

    def load_job_record(self, job_id: str) -> Job | None:
        return self._job(job_id)

    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]:
        wanted = set(states)
        matching = [(k.submitted_at, j) for j, k in self._index.items()
                    if (not wanted or k.state in wanted) and (not queue or k.queue == queue)
                    and (not owner or k.owner == owner)]
        page = sorted((key for key in matching if before is None or key < before), reverse=True)[:limit]
        return page, len(matching)

    def load_nodes(self) -> list[Node]:
        return [read_node(key.rpartition("/")[2], raw) for key, raw in self.mirror.items("state/nodes")]

    def load_decayed_usage(self) -> bytes | None:
        return self.mirror.get(DECAYED_USAGE_KEY)

    def load_kills(self) -> list[KillIntent]:
        out = []
        for table in self.mirror.tables("state/kills"):
            task_id = table.rpartition("/")[2]
            for key, raw in self.mirror.items(table):
                r = json.loads(raw)
                out.append(KillIntent(task_id, int(key.rpartition("/")[2]), r[0], r[1], kill_mode(r[2]),
                                      r[3] if len(r) > 3 else ""))
        return out

