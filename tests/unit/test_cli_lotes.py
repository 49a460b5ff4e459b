"""`tcl nodes` and `tcl status` with --placement lotes: bins, class mixes, the plan status."""

from __future__ import annotations

from tcluster.cli.replies import reply_node_json as node_json
from tcluster.cli.tables import lotes_line, mix_cell, nodes_table, tasks_table
from tcluster.v1 import common_pb2, jobs_pb2
from tests.unit.test_cli_render import make_node, make_task, task_json


def lotes_node() -> jobs_pb2.Node:
    node = make_node()
    node.lotes.CopyFrom(jobs_pb2.NodeLotes(config="c01", target={0: 2, 1: 1}, actual={0: 1}, counted={0: 1}))
    return node


STATUS = jobs_pb2.LotesStatus(last_solve="solved in 0.010s (no plan yet): 2 configurations", solves=1,
                              solve_seconds=0.01, classes=["small", "big"], classes_source="classes.yaml")


def test_nodes_table_shows_config_target_and_actual_only_for_lotes() -> None:
    assert "TARGET" not in nodes_table([make_node()])
    lines = nodes_table([lotes_node()], lotes=True).splitlines()
    assert lines[0].split()[-4:] == ["CONFIG", "TARGET", "ACTUAL", "LABELS"]
    assert "c01" in lines[1] and "c0:2 c1:1" in lines[1] and "c0:1 " in lines[1]
    assert mix_cell({}) == "-"


def test_lotes_line_says_the_plan_or_the_fallback() -> None:
    text = lotes_line(STATUS)
    assert text.startswith("placement lotes: following the plan") and "solved in 0.010s" in text
    assert "c0=small c1=big (classes.yaml)" in text
    fallback = jobs_pb2.LotesStatus(fallback="lotes falls back to anbf: scipy (HiGHS) is not installed")
    assert lotes_line(fallback).splitlines()[0] == "lotes falls back to anbf: scipy (HiGHS) is not installed"


def test_node_json_has_a_lotes_object_when_the_policy_is_lotes() -> None:
    assert "lotes" not in node_json(make_node())
    body = node_json(lotes_node(), STATUS)["lotes"]
    assert body == {"config": "c01", "target": {"0": 2, "1": 1}, "actual": {"0": 1}, "counted": {"0": 1},
                    "fallback": None, "classes": ["small", "big"]}


def test_tasks_table_and_json_show_the_class() -> None:
    plain = [make_task(0, common_pb2.TASK_RUNNING, node="n1")]
    assert "CLASS" not in tasks_table(plain)
    assert task_json(plain[0])["lotes_class"] is None
    tagged = [make_task(0, common_pb2.TASK_RUNNING, node="n1", lotes_class=1)]
    lines = tasks_table(tagged).splitlines()
    assert lines[0].split()[4] == "CLASS" and lines[1].split()[4] == "c1"
    assert task_json(tagged[0])["lotes_class"] == 1
