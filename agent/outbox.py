"""Task reports waiting for the master's acknowledgement. Each gets an increasing seq;
the master acks up to a seq once it has persisted them; whatever is unacked is sent
again after a reconnect, so no exit is lost while the master is away.

With a path, the unacked reports are also kept on disk (one JSON line each, rewritten on
ack), so they outlive an agent restart as well."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tcluster.domain.bounds import MAX_EVENTS_PER_MESSAGE
from tcluster.domain.model import TaskState, TaskUsage
from tcluster.domain.reports import TaskReport

log = logging.getLogger(__name__)


def report_to_json(seq: int, r: TaskReport) -> str:
    data: dict[str, Any] = asdict(r)
    data["state"] = r.state.value
    return json.dumps({"seq": seq, "report": data})


def report_from_json(line: str) -> tuple[int, TaskReport]:
    doc = json.loads(line)
    data = doc["report"]
    usage = TaskUsage(**data["usage"]) if data.get("usage") is not None else None
    report = TaskReport(**{**data, "state": TaskState(data["state"]), "usage": usage,
                           "gpus": tuple(data.get("gpus") or ())})
    return int(doc["seq"]), report


class Outbox:
    def __init__(self, path: Path | None = None) -> None:
        self._seq = 0
        self._unacked: list[tuple[int, TaskReport]] = []
        self._sent_upto = 0
        self._progress_at = time.monotonic()   # the last ack, or the last full resend
        self._path = path
        self.ready = asyncio.Event()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():   # made by an older agent under a looser umask
                os.chmod(path, 0o600)
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                self._unacked.append(report_from_json(line))
            except (ValueError, KeyError, TypeError) as error:   # a torn last line after a crash
                log.warning("skipping an unreadable report in %s: %s", path, error)
        self._seq = max((s for s, _ in self._unacked), default=0)
        if self._unacked:
            self.ready.set()

    def add(self, report: TaskReport) -> None:
        self._seq += 1
        self._unacked.append((self._seq, report))
        if self._path is not None:
            # Appended and fsynced before anyone can see it: a report on its way is on disk.
            with open(self._path, "a", opener=private_opener) as f:
                f.write(report_to_json(self._seq, report) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self.ready.set()

    def unacked(self, limit: int | None = None) -> list[tuple[int, TaskReport]]:
        return list(self._unacked[:limit])

    def take_unsent(self, limit: int = MAX_EVENTS_PER_MESSAGE) -> list[tuple[int, TaskReport]]:
        """Reports not yet sent on the current connection, at most `limit` (the rest next time)."""
        self.ready.clear()
        fresh = [(seq, r) for seq, r in self._unacked if seq > self._sent_upto]
        if len(fresh) > limit:
            fresh = fresh[:limit]
            self.ready.set()
        if fresh:
            if fresh[0][0] == self._unacked[0][0]:
                self._progress_at = time.monotonic()   # nothing older outstanding: the clock starts
            self._sent_upto = fresh[-1][0]
        return fresh

    def resend_if_stuck(self, now: float, after_s: float) -> bool:
        """Sends everything unacknowledged again when the master has acknowledged nothing
        for `after_s` although reports were sent (it may have failed to store them)."""
        if not self._unacked or self._sent_upto < self._unacked[0][0] or now - self._progress_at < after_s:
            return False
        self._sent_upto = 0
        self._progress_at = now
        self.ready.set()
        return True

    def mark_sent(self, upto: int) -> None:
        """After a Register that carried the unacked reports up to `upto`; the rest go
        as ordinary events right after it."""
        self._sent_upto = upto
        if any(seq > upto for seq, _ in self._unacked):
            self.ready.set()

    def ack(self, seq: int) -> None:
        before = len(self._unacked)
        if seq > 0:
            self._progress_at = time.monotonic()
        self._unacked = [(s, r) for s, r in self._unacked if s > seq]
        if self._path is not None and len(self._unacked) != before:
            tmp = self._path.with_name(self._path.name + ".tmp")
            with open(tmp, "w", opener=private_opener) as f:
                f.write("".join(report_to_json(s, r) + "\n" for s, r in self._unacked))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
            _fsync_dir(self._path.parent)



def private_opener(path: str, flags: int) -> int:
    """For open(): files the agent creates are root's alone (0600), whatever the umask."""
    return os.open(path, flags, 0o600)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
