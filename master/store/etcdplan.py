"""The etcd store's write plan, pure: which keys a step writes and in which order, and how a
group commit's steps are packed into transactions within etcd's limits.

A transaction holds either whole steps (several, merged: one write per key) or a part of
one step too large for one transaction (its keys in an order where every prefix loads).
Never a step's part beside other steps: so when a transaction fails, the steps written
before it are whole and durable, and those after it were never sent. That is what lets
the store answer for each step on its own (master/store/etcd.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from tcluster.wire.codec import spec_to_json
from tcluster.master.core.events import Step
from tcluster.scheduler.decay import encode
from tcluster.master.store.etcdrecords import job_record, kill_record, node_record, task_key, task_record

DECAYED_USAGE_KEY = "state/usage/decayed"   # --usage-half-life: one record (scheduler/decay.py)
Write = tuple[str, bytes | None]      # (relative key, value; None deletes)
# etcd's default --max-request-bytes (1.5 MiB). The master never sends one write larger than
# this less WRITE_MARGIN (the key, the leader compare, the protobuf framing): etcd would
# refuse the whole transaction with "request is too large".
ETCD_MAX_REQUEST_BYTES = 1_572_864
WRITE_MARGIN = 16_384
WRITE_OVERHEAD = 32                   # a put's framing in the TxnRequest, roughly
JOB_DELETE_OPS = 3                    # the job key, its tasks' range and its spec (EtcdStore._task_deletions)


def step_writes(step: Step, new_jobs: set[str], purge: Iterable[str]) -> list[Write]:
    """A step's keys, in the order that keeps every prefix of them loadable."""
    out: list[Write] = []
    doomed = sorted(set(step.jobs_del) | set(purge))
    out += [(f"state/jobs/{j}", None) for j in doomed]     # the job goes first: its tasks become orphans
    out += [(f"state/specs/{j.id}", spec_to_json(j.spec).encode()) for j in step.jobs.values()
            if j.id in new_jobs or j.id in step.specs]     # a new job's, or a spec `tcl update` changed
    out += [(task_key(t.job_id, t.index), task_record(t)) for t in step.tasks.values()]
    out += [(f"state/jobs/{j.id}", job_record(j)) for j in step.jobs.values() if j.id not in doomed]
    out += [(f"state/nodes/{n.name}", node_record(n)) for n in step.nodes.values()]
    out += [(f"state/kills/{task}/{attempt}", None) for task, attempt in sorted(step.kills_del)]
    out += [(f"state/kills/{k.task_id}/{k.attempt}", kill_record(k)) for k in step.kills_put.values()]
    if step.decayed_usage is not None:
        out.append((DECAYED_USAGE_KEY, encode(step.decayed_usage)))
    return out


def merge_writes(writes: list[Write]) -> list[Write]:
    """One write per key: etcd refuses a transaction that puts a key twice, or puts a key
    that a deletion in it covers ("duplicate key given in txn request"), and a group
    commit of several steps names the same job, task and node keys again and again. Each
    key keeps the place of its first write and takes its last value, so the orders
    step_writes keeps still hold (a new job's spec and tasks come before its key, as in
    its first step); the puts of a job deleted in the batch are dropped: its deletion
    removes its tasks and spec in the same transaction (EtcdStore._task_deletions)."""
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


def write_cost(write: Write) -> tuple[int, int]:
    """(operations, bytes) of one write in a transaction."""
    key, value = write
    ops = JOB_DELETE_OPS if value is None and key.startswith("state/jobs/") else 1
    return ops, len(key) + len(value or b"") + WRITE_OVERHEAD


def oversized(writes: list[Write], max_request_bytes: int = ETCD_MAX_REQUEST_BYTES) -> tuple[str, int] | None:
    """The first write etcd would refuse whatever it is packed with: (key, bytes), or None."""
    for write in writes:
        size = write_cost(write)[1]
        if size > max_request_bytes - WRITE_MARGIN:
            return write[0], size
    return None


def touches(writes: Iterable[Write]) -> set[str]:
    """The rows a step changes, by owner: 'job:J' for a job's key, spec, tasks and kills,
    'node:N'. A later step that changes none of a refused step's rows does not depend on it."""
    out = set()
    for key, _ in writes:
        _, table, name = key.split("/", 3)[:3]
        if table == "kills":
            out.add("job:" + name.rpartition(".")[0])
        else:
            out.add(("node:" if table == "nodes" else "job:") + name)
    return out


def chunks(writes: list[Write], max_ops: int, max_bytes: int) -> Iterator[list[Write]]:
    """Transactions within the limits, in order (the writes are merged: one per key)."""
    chunk: list[Write] = []
    ops = size = 0
    for write in writes:
        cost_ops, cost_bytes = write_cost(write)
        if chunk and (ops + cost_ops > max_ops or size + cost_bytes > max_bytes):
            yield chunk
            chunk, ops, size = [], 0, 0
        chunk.append(write)
        ops, size = ops + cost_ops, size + cost_bytes
    if chunk:
        yield chunk


@dataclass(frozen=True)
class Txn:
    steps: tuple[int, ...]       # the steps whose writes it holds (several whole ones, or a part of one)
    writes: tuple[Write, ...]
    ends: bool                   # its steps are whole once it is written (False: more parts follow)


class _Held:
    """The whole steps packed so far into the next transaction, and what they cost merged."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.writes: list[Write] = []
        self.costs: dict[str, tuple[int, int]] = {}     # key -> its last write's cost
        self.ops = self.size = 0

    def try_add(self, index: int, writes: list[Write], max_ops: int, max_bytes: int) -> bool:
        """Adds the step if the merged transaction stays within the limits (an upper bound:
        a deleted job's puts, dropped by merge_writes, still count)."""
        costs = dict(self.costs)
        ops, size = self.ops, self.size
        for write in writes:
            old_ops, old_size = costs.get(write[0], (0, 0))
            costs[write[0]] = new = write_cost(write)
            ops, size = ops + new[0] - old_ops, size + new[1] - old_size
        if ops > max_ops or size > max_bytes:
            return False
        self.steps.append(index)
        self.writes += writes
        self.costs, self.ops, self.size = costs, ops, size
        return True

    def txn(self) -> Txn:
        return Txn(tuple(self.steps), tuple(merge_writes(self.writes)), True)


def plan_txns(steps: list[tuple[int, list[Write]]], max_ops: int, max_bytes: int,
              alone: frozenset[int] = frozenset()) -> list[Txn]:
    """Packs steps (index, writes), in order, into transactions; a step in `alone` shares
    a transaction with no other (the store retries a refused batch that way)."""
    out: list[Txn] = []
    held = _Held()
    for index, writes in steps:
        shared = index not in alone and not (held.steps and held.steps[-1] in alone)
        if shared and held.try_add(index, writes, max_ops, max_bytes):
            continue
        if held.steps:
            out.append(held.txn())
        held = _Held()
        if held.try_add(index, writes, max_ops, max_bytes):
            continue
        parts = list(chunks(merge_writes(writes), max_ops, max_bytes))
        out += [Txn((index,), tuple(part), n == len(parts) - 1) for n, part in enumerate(parts)]
    if held.steps:
        out.append(held.txn())
    return out
