"""A storm of gRPC submits that follows the leader across a failover, as a client of a
master list should: it tries the last leader, then the others; a standby's refusal
(UNAVAILABLE with `tcl-leader` metadata) and a refused connection mean "not applied", so
the submit is tried again elsewhere. Any other failure (the leader died mid-call, a
deadline, a write etcd did not confirm) leaves the outcome unknown: each submit carries
a request id (`storm-N`), so it is sent again until a leader answers, and the master
returns the job the first attempt made if there is one. The test then checks that
every submit is acknowledged and made exactly one job."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc

from testkit.hacluster import LEADER_METADATA
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc


def storm_spec(n: int, tag: str = "storm") -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["echo", f"{tag}-{n}"], tasks=1, name=f"{tag}-{n}", request_id=f"{tag}-{n}")
    spec.resources.cpu, spec.resources.memory = 0.1, 2**20
    return spec


def _not_applied(error: grpc.RpcError) -> bool:
    """The master surely did not apply the call: a standby refused it, or no connection."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:   # type: ignore[attr-defined]
        return False
    meta = dict(error.trailing_metadata() or ())      # type: ignore[attr-defined]
    details = (error.details() or "").lower()         # type: ignore[attr-defined]
    return LEADER_METADATA in meta or "standby" in details or "failed to connect" in details \
        or "connection refused" in details


@dataclass
class Storm:
    addresses: list[str]
    submits: int = 100
    clients: int = 4
    per_submit_s: float = 60.0     # how long one submit keeps looking for a leader
    tag: str = "storm"
    acked: dict[str, int] = field(default_factory=dict)      # job id -> n
    unknown: list[int] = field(default_factory=list)         # n whose outcome stayed unknown until per_submit_s
    resent: int = 0                                          # sends again after an unknown outcome
    refused: list[int] = field(default_factory=list)         # n refused by every master until per_submit_s
    retried: int = 0
    errors: dict[str, int] = field(default_factory=dict)     # "CODE: details" of the unknown ones -> count
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Storm:
        per = self.submits // self.clients
        for c in range(self.clients):
            numbers = range(c * per, self.submits if c == self.clients - 1 else (c + 1) * per)
            thread = threading.Thread(target=self._client, args=(numbers,), name=f"storm-{c}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def join(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), f"storm clients still running after {timeout_s}s"

    def report(self) -> str:
        with self._lock:
            lines = [f"storm: {len(self.acked)} acknowledged, {len(self.unknown)} unknown until the end, "
                     f"{len(self.refused)} refused throughout, {self.retried} standby/connection refusals retried, "
                     f"{self.resent} sent again with their request id after an unknown outcome"]
            lines += [f"  unknown outcome x{count}: {why}"
                      for why, count in sorted(self.errors.items(), key=lambda kv: -kv[1])]
        return "\n".join(lines)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _client(self, numbers: range) -> None:
        channels = {a: grpc.insecure_channel(a) for a in self.addresses}
        leader = self.addresses[0]
        try:
            for n in numbers:
                leader = self._submit(channels, leader, n)
        finally:
            for channel in channels.values():
                channel.close()

    def _submit(self, channels: dict[str, grpc.Channel], leader: str, n: int) -> str:
        """Rounds over the masters (the last leader first, a standby's hint right after it
        refused) until one acknowledges; a pause between rounds. Returns the leader."""
        deadline = time.monotonic() + self.per_submit_s
        last_refusal, last_unknown = "", False
        while time.monotonic() < deadline:
            queue = [leader] + [a for a in self.addresses if a != leader]
            tried: set[str] = set()
            while queue:
                target = queue.pop(0)
                if target in tried:
                    continue
                tried.add(target)
                if target not in channels:
                    channels[target] = grpc.insecure_channel(target)
                try:
                    job = jobs_pb2_grpc.JobServiceStub(channels[target]).Submit(
                        jobs_pb2.SubmitRequest(spec=storm_spec(n, self.tag)), timeout=10)
                except grpc.RpcError as e:
                    if not _not_applied(e):
                        why = f"{e.code().name}: {(e.details() or '')[:160]}"   # type: ignore[attr-defined]
                        with self._lock:
                            self.resent += 1
                            self.errors[why] = self.errors.get(why, 0) + 1
                        last_unknown = True
                        continue       # the same request id again: at most one job comes of it
                    last_refusal = (e.details() or "")[:160]   # type: ignore[attr-defined]
                    hint = str(dict(e.trailing_metadata() or ()).get(LEADER_METADATA, ""))  # type: ignore[attr-defined]
                    with self._lock:
                        self.retried += 1
                    if hint and hint not in tried:
                        queue.insert(0, hint)
                    continue
                with self._lock:
                    self.acked[job.id] = n
                return target
            time.sleep(0.1)    # every master refused: no leader yet
        with self._lock:
            if last_unknown:
                self.unknown.append(n)
                return leader
            self.refused.append(n)   # never applied: it was refused every time
            self.errors[f"refused for {self.per_submit_s}s, last: {last_refusal}"] = \
                self.errors.get(f"refused for {self.per_submit_s}s, last: {last_refusal}", 0) + 1
        return leader
