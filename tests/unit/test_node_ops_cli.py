"""`tcl node`: its time arguments, the OPERATOR cell of `tcl nodes`, and the drain monitor
against a scripted master (each blocking task once, why changes, the deadline, DRAINED;
a cancelled drain exits 1; Ctrl-C stops monitoring with 130)."""

from __future__ import annotations

import argparse
from typing import Iterator

import pytest

from tcluster.cli.main import build_parser
from tcluster.cli.nodecmd import monitor
from tcluster.cli.nodeparser import parse_duration, parse_start
from tcluster.cli.tables import node_ops_cell, nodes_table
from tcluster.v1 import jobs_pb2


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172800),
                                          ("0.5h", 1800)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "1x", "5m3", "h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_start_times() -> None:
    assert parse_start("now", now=lambda: 100.0) == 100.0
    assert parse_start("+30m", now=lambda: 100.0) == 1900.0
    assert parse_start("1700000000") == 1700000000.0
    assert parse_start("2026-11-27T02:00:00Z") == 1795744800.0
    with pytest.raises(argparse.ArgumentTypeError):
        parse_start("tomorrow")


def test_the_parser_takes_each_op_and_refuses_a_maint_without_a_window() -> None:
    args = build_parser(["node"]).parse_args(["node", "drain", "n1", "n2", "--deadline", "1h", "--monitor"])
    assert (args.node_op, args.nodes, args.deadline, args.monitor) == ("drain", ["n1", "n2"], 3600.0, True)
    with pytest.raises(SystemExit):
        build_parser(["node"]).parse_args(["node", "maint", "n1", "--start", "now"])


def test_the_operator_column_appears_only_when_something_was_asked() -> None:
    plain = jobs_pb2.Node(name="n1", state="READY")
    assert "OPERATOR" not in nodes_table([plain])
    cordoned = jobs_pb2.Node(name="n2", state="CORDONED", ops=jobs_pb2.NodeOps(state="CORDONED", by="alice", at=1e9,
                                                                                reason="bad disk"))
    table = nodes_table([plain, cordoned], now=1e9)
    assert table.splitlines()[0].split()[-1] == "OPERATOR"
    assert "cordoned by alice" in table and "bad disk" in table
    draining = jobs_pb2.NodeOps(state="DRAINING", by="bob", at=1e9, drain_deadline=1e9 + 600, maint_end=2e9,
                                maint_start=2e9 - 60, maint_by="ops", maint_reason="ups")
    cell = node_ops_cell(draining, now=1e9)
    assert "draining by bob" in cell and "deadline" in cell and "(in 10m)" in cell and "maint " in cell and "ups" in cell


class Script:
    """A master whose node list moves through the given replies, one per poll."""

    def __init__(self, replies: list[list[jobs_pb2.Node]]) -> None:
        self.replies: Iterator[list[jobs_pb2.Node]] = iter(replies)

    def list_nodes(self) -> list[jobs_pb2.Node]:
        return next(self.replies)


def draining(*blockers: tuple[str, str], deadline: float = 0.0) -> jobs_pb2.Node:
    return jobs_pb2.Node(name="n1", state="DRAINING", ops=jobs_pb2.NodeOps(state="DRAINING", drain_deadline=deadline,
                                                                          drain_since=10.0),
                         blockers=[jobs_pb2.NodeBlocker(task_id=t, job_id=t.split(".")[0], state="RUNNING", why=why)
                                   for t, why in blockers])


def test_the_monitor_says_each_thing_once_until_drained() -> None:
    running = "running; the drain waits for it to end, or requeues it at the deadline 12:00:00"
    replies = [
        [draining(("j1.0", running + " (in 4s)"), ("j2.0", running + " (in 4s)"), deadline=50.0)],
        [draining(("j1.0", running + " (in 3s)"), ("j2.0", running + " (in 3s)"), deadline=50.0)],   # a countdown only
        [draining(("j2.0", running + " (in 2s)"), deadline=50.0)],                                    # j1 ended
        [draining(("j2.0", "being stopped (drained: node n1 reached its deadline): SIGTERM"), deadline=50.0)],
        [jobs_pb2.Node(name="n1", state="DRAINED", ops=jobs_pb2.NodeOps(state="DRAINED", at=16.0, drain_since=10.0))],
    ]
    lines: list[str] = []
    clock = iter([1.0, 2.0, 3.0, 60.0, 61.0])
    code = monitor(Script(replies), ["n1"], lines.append, sleep=lambda s: None, now=lambda: next(clock))  # type: ignore[arg-type]
    assert code == 0
    said = [line.split(":")[1].strip() for line in lines]
    assert said[3].startswith("deadline ")     # a local clock time
    assert said[:3] + said[4:] == [
        "waiting for task j1.0 of job j1, RUNNING", "waiting for task j2.0 of job j2, RUNNING",
        "task j1.0 left the node", "waiting for task j2.0 of job j2, RUNNING", "DRAINED after 6s"]
    assert "being stopped" in lines[4] and lines[3].endswith("the 1 task(s) left are stopped and requeued elsewhere")


def test_a_cancelled_drain_ends_the_monitor_with_1_and_ctrl_c_with_130() -> None:
    uncordoned = jobs_pb2.Node(name="n1", state="READY", ops=jobs_pb2.NodeOps(state="READY", by="bob"))
    assert monitor(Script([[uncordoned]]), ["n1"], lambda line: None, sleep=lambda s: None) == 1  # type: ignore[arg-type]

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt
    assert monitor(Script([[draining()]]), ["n1"], lambda line: None, sleep=interrupted) == 130  # type: ignore[arg-type]
