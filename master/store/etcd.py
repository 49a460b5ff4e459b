"""The master's durable state in etcd (docs/ha.md): the StateStore for `--store etcd://`.

Writes are fenced transactions (master/store/leadership.py): a batch applies only while this
master's leader key stands. etcd caps a transaction's operations (`--max-txn-ops`, 128 by
default) and its size, so a large batch goes out as several transactions, in order, and
each step's keys are ordered so that any prefix of them is a state a restart handles: a
job's spec and tasks before the job's own key (a reader ignores tasks and specs whose job
key is missing), deletions of a job's key before its tasks. Nothing of a batch is visible
outside until all of it is written, as with SQLite.

Reads come from the Mirror (master/store/etcdmirror.py), in memory: a standby's warm copy is
the state the new leader starts from. A write whose outcome etcd did not report (no
quorum, a timeout) ends this master's term: it steps down and the next leader reads
what etcd holds."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Iterable

from tcluster.codec import resources_from_dict, resources_to_dict, spec_from_json, spec_to_json, usage_from_json, usage_to_json
from tcluster.master.store.etcdbridge import EtcdBridge
from tcluster.master.store.etcdkv import EtcdKV, EtcdUnavailable, delete, delete_prefix, put
from tcluster.master.store.etcdmirror import Mirror
from tcluster.master.core.events import KillIntent, Step
from tcluster.master.store.leadership import Leadership, NotLeader
from tcluster.master.store.sqlite import StoreError
from tcluster.model import Job, JobState, Node, NodeState, Task, TaskState, TaskUsage

log = logging.getLogger(__name__)
Write = tuple[str, bytes | None]      # (relative key, value; None deletes)


# ---- the one etcd codec of each record ----

def _dumps(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def job_record(job: Job) -> bytes:
    return _dumps([job.state.value, job.submitted_at, job.finished_at, int(job.cancelled)])


def task_record(t: Task) -> bytes:
    usage = "" if t.usage == TaskUsage() else usage_to_json(t.usage)
    return _dumps([t.state.value, t.node, t.attempt, t.exit_code, t.signal, t.reason, t.started_at, t.finished_at,
                   usage, t.failures])


def node_record(n: Node) -> bytes:
    return _dumps([resources_to_dict(n.capacity), resources_to_dict(n.reserved), dict(n.labels), n.state.value,
                   n.last_seen, n.runtime])


def kill_record(k: KillIntent) -> bytes:
    return _dumps([k.node, k.reason, int(k.retry)])


def _task(job_id: str, index: int, raw: bytes) -> Task:
    r = json.loads(raw)
    return Task(job_id=job_id, index=index, state=TaskState(r[0]), node=r[1], attempt=r[2], exit_code=r[3],
                signal=r[4], reason=r[5], started_at=r[6], finished_at=r[7],
                usage=usage_from_json(r[8]) if r[8] else TaskUsage(), failures=r[9])


def _node(name: str, raw: bytes) -> Node:
    r = json.loads(raw)
    return Node(name=name, capacity=resources_from_dict(r[0]), reserved=resources_from_dict(r[1]),
                labels=tuple(sorted(r[2].items())), state=NodeState(r[3]), last_seen=r[4], runtime=r[5])


@dataclass(frozen=True)
class JobKey:
    """What listing and purging need of a job, kept current from the copy's changes."""
    submitted_at: float
    state: str
    finished_at: float
    queue: str
    owner: str


def task_key(job_id: str, index: int) -> str:
    return f"state/tasks/{job_id}/{index:06d}"


def step_writes(step: Step, new_jobs: set[str], purge: Iterable[str]) -> list[Write]:
    """A step's keys, in the order that keeps every prefix of them loadable."""
    out: list[Write] = []
    doomed = sorted(set(step.jobs_del) | set(purge))
    out += [(f"state/jobs/{j}", None) for j in doomed]     # the job goes first: its tasks become orphans
    out += [(f"state/specs/{j.id}", spec_to_json(j.spec).encode()) for j in step.jobs.values() if j.id in new_jobs]
    out += [(task_key(t.job_id, t.index), task_record(t)) for t in step.tasks.values()]
    out += [(f"state/jobs/{j.id}", job_record(j)) for j in step.jobs.values() if j.id not in doomed]
    out += [(f"state/nodes/{n.name}", node_record(n)) for n in step.nodes.values()]
    out += [(f"state/kills/{task}/{attempt}", None) for task, attempt in sorted(step.kills_del)]
    out += [(f"state/kills/{k.task_id}/{k.attempt}", kill_record(k)) for k in step.kills_put.values()]
    return out


def merge_writes(writes: list[Write]) -> list[Write]:
    """One write per key: etcd refuses a transaction that puts a key twice, or puts a key
    that a deletion in it covers ("duplicate key given in txn request"), and a group
    commit of several steps names the same job, task and node keys again and again. Each
    key keeps the place of its first write and takes its last value, so the orders
    step_writes keeps still hold (a new job's spec and tasks come before its key, as in
    its first step); the puts of a job deleted in the batch are dropped: its deletion
    removes its tasks and spec in the same transaction (_task_deletions)."""
    at: dict[str, int] = {}
    out: list[Write] = []
    for key, value in writes:
        where = at.get(key)
        if where is None:
            at[key] = len(out)
            out.append((key, value))
        else:
            out[where] = (key, value)
    doomed = {key[len("state/jobs/"):] for key, value in out if value is None and key.startswith("state/jobs/")}
    if doomed:
        out = [(key, value) for key, value in out if not (
            (key.startswith("state/tasks/") and key.split("/")[2] in doomed)
            or (key.startswith("state/specs/") and key[len("state/specs/"):] in doomed))]
    return out


class EtcdStore:
    def __init__(self, kv: EtcdKV, mirror: Mirror, leadership: Leadership, max_txn_ops: int = 128,
                 max_txn_bytes: int = 1_000_000, bridge: EtcdBridge | None = None) -> None:
        self.kv, self.mirror, self.leadership = kv, mirror, leadership
        # Transactions go through the bridge's own loop when given: awaited on the master's
        # busy loop, each one waited ~45 ms for its turn at 2,000 agents (bench/results/ha-*).
        self.bridge = bridge
        self.max_txn_ops, self.max_txn_bytes = max_txn_ops, max_txn_bytes
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

    async def commit(self, steps: list[tuple[Step, list[str]]]) -> None:
        writes: list[Write] = []
        for step, new_jobs in steps:
            if step.durable:
                purge = self._purgeable(step.purge_before) if step.purge_before else []
                writes += step_writes(step, set(new_jobs), purge)
        for chunk in self._chunks(merge_writes(writes)):
            await self._write(chunk)

    def _purgeable(self, before: float) -> list[str]:
        return sorted(j for j, k in self._index.items() if 0 < k.finished_at < before)

    def _chunks(self, writes: list[Write]) -> Iterable[list[Write]]:
        """Transactions within etcd's limits, in order (the writes are merged: one per key)."""
        chunk: list[Write] = []
        size = 0
        for write in writes:
            cost = len(write[0]) + len(write[1] or b"") + 32
            if chunk and (len(chunk) >= self.max_txn_ops or size + cost > self.max_txn_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append(write)
            size += cost
        if chunk:
            yield chunk

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
        return Job(id=job_id, spec=spec_from_json(spec.decode()), state=JobState(r[0]), submitted_at=r[1],
                   finished_at=r[2], cancelled=bool(r[3]))

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
                out.append(_task(job_id, int(key.rpartition("/")[2]), raw))
        return out

    def load_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        job = self._job(job_id)
        return (job, self.load_tasks({job_id})) if job is not None else None

    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]:
        wanted = set(states)
        matching = [(k.submitted_at, j) for j, k in self._index.items()
                    if (not wanted or k.state in wanted) and (not queue or k.queue == queue)
                    and (not owner or k.owner == owner)]
        page = sorted((key for key in matching if before is None or key < before), reverse=True)[:limit]
        return page, len(matching)

    def load_nodes(self) -> list[Node]:
        return [_node(key.rpartition("/")[2], raw) for key, raw in self.mirror.items("state/nodes")]

    def load_kills(self) -> list[KillIntent]:
        out = []
        for table in self.mirror.tables("state/kills"):
            task_id = table.rpartition("/")[2]
            for key, raw in self.mirror.items(table):
                r = json.loads(raw)
                out.append(KillIntent(task_id, int(key.rpartition("/")[2]), r[0], r[1], bool(r[2])))
        return out

