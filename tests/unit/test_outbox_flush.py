"""The agent's outbox as a table of operations (issue 26, coalesced reports): reports added
between two flushes go in one batch; an ack removes exactly what it covers, once; and an
agent that dies at any point (a fresh Outbox on the same file) still holds every report
not acknowledged, and nothing that was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.agent.outbox import Outbox
from tcluster.domain.model import TaskState
from tcluster.domain.reports import TaskReport


def report(i: int, state: TaskState = TaskState.RUNNING) -> TaskReport:
    return TaskReport(task_id=f"0123abcd.{i}", attempt=1, state=state, at=float(i))


# ops: ("add", n) adds n reports; ("flush",) takes what is unsent (one message); ("ack", seq);
# ("crash",) reopens the file. expected: the flushes' seqs, and the unacked seqs at the end.
@pytest.mark.parametrize("ops,flushes,unacked", [
    ([("add", 3), ("flush",), ("ack", 3)], [[1, 2, 3]], []),
    ([("add", 3), ("flush",), ("crash",)], [[1, 2, 3]], [1, 2, 3]),                 # died before the ack
    ([("add", 2), ("flush",), ("add", 2), ("ack", 2), ("crash",)], [[1, 2]], [3, 4]),  # died between flushes
    ([("add", 2), ("flush",), ("add", 2), ("flush",), ("ack", 2), ("ack", 4)], [[1, 2], [3, 4]], []),
    ([("add", 2), ("flush",), ("ack", 2), ("ack", 2), ("crash",)], [[1, 2]], []),    # an ack repeated: no harm
    ([("add", 4), ("flush",), ("ack", 1), ("crash",), ("add", 1)], [[1, 2, 3, 4]], [2, 3, 4, 5]),
    ([("add", 2), ("crash",), ("flush",)], [[1, 2]], [1, 2]),                        # never sent: sent after
])
def test_reports_flush_together_and_survive_until_acked(tmp_path: Path, ops, flushes, unacked) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "outbox.jsonl"
    box, seen, n = Outbox(path), [], 0
    for op in ops:
        if op[0] == "add":
            for _ in range(op[1]):
                box.add(report(n))
                n += 1
        elif op[0] == "flush":
            seen.append([seq for seq, _ in box.take_unsent()])
        elif op[0] == "ack":
            box.ack(op[1])
        else:
            box = Outbox(path)
    assert seen == flushes
    assert [seq for seq, _ in box.unacked()] == unacked
    assert [seq for seq, _ in Outbox(path).unacked()] == unacked      # and so on disk


def test_a_flush_takes_every_report_raised_since_the_last_in_one_batch(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.jsonl")
    for i in range(50):
        box.add(report(i, TaskState.RUNNING if i < 25 else TaskState.SUCCEEDED))
    assert len(box.take_unsent()) == 50 and box.take_unsent() == []
