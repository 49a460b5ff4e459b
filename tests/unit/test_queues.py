"""The queue file: the tree, guaranteed shares, and errors that name the line."""

from __future__ import annotations

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.scheduler.queues import default_tree, parse_queue_text
from tcluster.scheduler.queuestats import JobUsage, queue_rows
from tcluster.domain.resources import Resources
from tcluster.scheduler.yamlsrc import YamlConfigError, format_path

PAPER = """\
queues:
  ads:
    weight: 60
    queues:
      prod: {weight: 90}
      test: {weight: 10}
  dev:
    weight: 40
    queues: {prod: {weight: 90}, test: {weight: 10}}
"""


def test_the_papers_tree_has_four_leaves_with_their_guarantees() -> None:
    tree = parse_queue_text(PAPER, "q.yaml")
    assert tree.leaves == ("ads.prod", "ads.test", "dev.prod", "dev.test")
    shares = {leaf: round(tree.guaranteed_share(leaf), 6) for leaf in tree.leaves}
    assert shares == {"ads.prod": 0.54, "ads.test": 0.06, "dev.prod": 0.36, "dev.test": 0.04}
    assert tree.guaranteed_share("ads") == pytest.approx(0.6)
    assert tree.node("ads").line == 2 and tree.node("dev.test").line == 9
    assert tree.is_leaf("ads.prod") and not tree.is_leaf("ads") and not tree.is_leaf("nope")


def test_default_weight_is_one_and_parent_form_attaches_under_a_path() -> None:
    tree = parse_queue_text("queues:\n  a: {queues: {b: {}}}\n  c: {parent: a.b, weight: 3}\n  d:\n", "q")
    assert tree.leaves == ("a.b.c", "d")
    assert tree.node("a").weight == 1 and tree.node("a.b.c").weight == 3
    assert tree.guaranteed_share("a.b.c") == pytest.approx(0.5)


def test_without_a_file_there_is_one_leaf_default() -> None:
    assert default_tree().leaves == ("default",)
    assert default_tree().guaranteed_share("default") == 1.0


@pytest.mark.parametrize("text, line, words", [
    ("queues:\n  a: {parent: b}\n  b: {parent: a}\n", 2, "cycle: a -> b -> a"),
    ("queues:\n  a: {parent: a}\n", 2, "cycle: a -> a"),
    ("queues:\n  a: &x\n    queues:\n      b: *x\n", 4, "queues.a.queues.b: is a cycle"),
    ("queues:\n  a: {}\n  b: {parent: zz}\n", 3, "unknown parent queue 'zz'"),
    ("queues:\n  a: {weight: 0}\n", 2, "queues.a.weight: 0 must be > 0"),
    ("queues:\n  a:\n    weight: -2\n", 3, "queues.a.weight: -2 must be > 0"),
    ("queues:\n  a: {weight: lots}\n", 2, "'lots' is not a number"),
    ("queues:\n  a: {}\n  b: {}\n  a: {}\n", 4, "queues.a: duplicate name (first given at line 2)"),
    ("queues:\n  a: {queues: {b: {}}}\n  b: {parent: a}\n", 3, "duplicate queue 'a.b'"),
    ("queues:\n  a.b: {}\n", 2, "a queue name is 1-63"),
    ("queues:\n  a: {wieght: 2}\n", 2, "queues.a.wieght: unknown key"),
    ("queues:\n  a: {hide_command: yes please}\n", 2, "queues.a.hide_command: must be true or false"),
    ("queues:\n  a: {queues: {}}\n", 2, "non-empty mapping"),
    ("queues: [a, b]\n", 1, "must be a mapping"),
    ("nodes: []\n", 1, "`queues:` mapping at the top"),
    ("queues:\n  a: {weight: [1\n", 3, "not valid YAML"),
])
def test_bad_files_are_refused_naming_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(YamlConfigError) as caught:
        parse_queue_text(text, "q.yaml")
    assert caught.value.line == line
    assert str(caught.value).startswith(f"q.yaml:{line}: ")
    assert words in str(caught.value)


@pytest.mark.parametrize("path, what", [("ads", "is not a leaf queue"), ("ops.prod", "is not a queue")])
def test_submitting_to_a_non_leaf_lists_the_leaves(path: str, what: str) -> None:
    tree = parse_queue_text(PAPER, "q.yaml")
    with pytest.raises(InvalidArgument) as caught:
        tree.check_leaf(path)
    assert what in str(caught.value) and "ads.prod, ads.test, dev.prod, dev.test" in str(caught.value)
    tree.check_leaf("dev.test")


def test_paths_print_like_the_errors_say() -> None:
    assert format_path(("jobs", 3, "resources", "cpu")) == "jobs[3].resources.cpu"
    assert format_path(()) == ""


def test_queue_rows_add_up_jobs_into_every_ancestor() -> None:
    tree = parse_queue_text(PAPER, "q.yaml")
    usage = [JobUsage("ads.prod", Resources(1, 0), 30, 5), JobUsage("ads.test", Resources(0, 2), 10, 0),
             JobUsage("gone", Resources(1, 0), 10, 0)]
    rows = {r.path: r for r in queue_rows(tree, usage, Resources(100, 100))}
    assert rows["ads.prod"].dominant_share == pytest.approx(0.3) and rows["ads.prod"].pending_tasks == 5
    assert rows["ads"].dominant_share == pytest.approx(0.3) and rows["ads"].running_tasks == 40
    assert rows["ads"].allocated == Resources(30, 20) and rows["ads"].running_jobs == 2
    assert rows[""].running_tasks == 50   # the root counts everything, orphans included
    assert rows["gone"].in_tree is False and rows["gone"].dominant_share == pytest.approx(0.1)
    assert rows["dev.prod"].guaranteed_share == pytest.approx(0.36) and rows["dev"].running_tasks == 0


def test_hide_command_is_inherited_from_the_nearest_queue_that_sets_it() -> None:
    tree = parse_queue_text("queues:\n  sec: {hide_command: true, queues: {a: {}, b: {hide_command: false}}}\n"
                            "  open: {queues: {c: {}}}\n", "q.yaml")
    assert [tree.hides_command(p) for p in ("sec", "sec.a", "sec.b", "open.c", "nowhere")] == \
        [True, True, False, False, False]
    assert not default_tree().hides_command("default")
