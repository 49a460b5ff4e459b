"""`--stdout-file`/`--stderr-file` patterns (Slurm's %j %t %a %A %u %x %%), the open mode
an attempt gets, and where `tcl logs` finds a redirected stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from tcluster.agent.outputs import log_source, save_outputs, task_outputs, TaskOutputs
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec
from tcluster.domain.outputfiles import OutputNames, check_pattern, expand, names_each_task
from tcluster.domain.resources import Resources
from tcluster.domain.scripts import SCRIPT_PATH

NAMES = OutputNames(job_id="ab12cd34", task_index=7, user="alice", job_name="train", node="n1")


@pytest.mark.parametrize(("pattern", "expanded"), [
    ("slurm-%j.out", "slurm-ab12cd34.out"),
    ("out-%j-%t.txt", "out-ab12cd34-7.txt"),
    ("%A_%a.log", "ab12cd34_7.log"),
    ("/home/%u/logs/%x.%j", "/home/alice/logs/train.ab12cd34"),
    ("100%%-%t", "100%-7"),
    ("%%j", "%j"),                   # an escaped percent is no letter
    ("%N.%j.out", "n1.ab12cd34.out"),
    ("%4t-%3a", "0007-007"),         # Slurm's zero padding
    ("plain.txt", "plain.txt"),
    ("", ""),
])
def test_patterns_expand_as_slurm_s(pattern: str, expanded: str) -> None:
    check_pattern("stdout_file", pattern)
    assert expand(pattern, NAMES) == expanded


@pytest.mark.parametrize(("pattern", "words"), [
    ("out-%n.txt", ["stdout_file", "%n", "not a pattern letter", "%j job id"]),
    ("out-%s", ["%s", "allowed"]),
    ("out-%", ["lone %", "%%"]),
    ("out-%11j", ["width"]),
    ("logs/", ["directory"]),
    ("a\x00b", ["NUL"]),
    ("x" * 5000, ["longer than 4096"]),
])
def test_bad_patterns_are_refused_naming_what_is_wrong(pattern: str, words: list[str]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_pattern("stdout_file", pattern)
    for word in words:
        assert word in str(caught.value)


def test_a_job_spec_with_a_bad_pattern_is_refused_at_validation() -> None:
    with pytest.raises(InvalidArgument, match="stderr_file: %q"):
        JobSpec(("x",), Resources(1), stderr_file="err-%q").validate()
    with pytest.raises(InvalidArgument, match="open_mode"):
        JobSpec(("x",), Resources(1), open_mode="sometimes").validate()
    with pytest.raises(InvalidArgument, match="image"):
        JobSpec(("x",), Resources(1), image="alpine", stdout_file="o").validate()


@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=60))
def test_any_text_with_percents_doubled_expands_to_itself(text: str) -> None:
    pattern = text.replace("%", "%%")
    if pattern.endswith("/"):
        return
    check_pattern("stdout_file", pattern)
    assert expand(pattern, NAMES) == text


@given(st.lists(st.sampled_from(["%j", "%t", "%a", "%A", "%u", "%x", "%N", "%%", "-", "x", "/"]), max_size=12))
def test_expansion_leaves_no_pattern_letter_behind(parts: list[str]) -> None:
    pattern = "f" + "".join(parts) + ".txt"
    check_pattern("stdout_file", pattern)
    out = expand(pattern, NAMES)
    assert out.count("%") == pattern.count("%%")
    assert names_each_task(pattern) == ("%t" in pattern.replace("%%", "") or "%a" in pattern.replace("%%", ""))


def launch(attempt: int = 1, **spec: object) -> Launch:
    return Launch("ab12cd34.7", attempt, "ab12cd34", 7, JobSpec(("/bin/job", "arg"), Resources(1), **spec))  # type: ignore[arg-type]


@pytest.mark.parametrize(("attempt", "spec", "append"), [
    (1, {"stdout_file": "o-%t"}, False),                              # a one-task job's first attempt truncates
    (2, {"stdout_file": "o-%t"}, True),                               # a retry adds to the first's output
    (1, {"stdout_file": "o", "tasks": 3}, True),                      # three tasks share o: none truncates
    (1, {"stdout_file": "o-%t", "tasks": 3}, False),                  # each has its own
    (1, {"stdout_file": "o-%j", "array": "0-3"}, True),
    (1, {"stdout_file": "o-%a", "stderr_file": "e", "array": "0-3"}, True),   # e is shared
    (1, {"stdout_file": "o-%t", "open_mode": "append"}, True),
])
def test_which_attempts_append(attempt: int, spec: dict[str, object], append: bool) -> None:
    assert task_outputs(launch(attempt, **spec), "alice").append is append


def test_stderr_follows_stdout_without_its_own_file_and_a_script_runs_by_its_interpreter() -> None:
    out = task_outputs(launch(stdout_file="%x-%u-%j.%t", name="train", script="#!/bin/bash -e\necho\n"), "alice")
    assert (out.stdout_file, out.stderr_file) == ("train-alice-ab12cd34.7", "train-alice-ab12cd34.7")
    assert out.command == ("/bin/bash", "-e", SCRIPT_PATH, "arg")
    unnamed = task_outputs(launch(stderr_file="e-%x"), "alice")
    assert (unnamed.stdout_file, unnamed.stderr_file, unnamed.command) == ("", "e-job", ("/bin/job", "arg"))


def test_logs_read_the_user_s_file_where_the_task_wrote_one(tmp_path: Path) -> None:
    save_outputs(tmp_path, TaskOutputs(stdout_file="out.txt", stderr_file="../e.txt"), "/srv/run", 1000)
    assert json.loads((tmp_path / "outputs.json").read_text())["uid"] == 1000
    assert log_source(tmp_path, "stdout") == (Path("/srv/run/out.txt"), 1000)
    assert log_source(tmp_path, "stderr") == (Path("/srv/e.txt"), 1000)
    private = tmp_path / "private"
    private.mkdir()
    save_outputs(private, TaskOutputs(stdout_file="out.txt", stderr_file="/srv/e.txt"), "/tmp", 1000, True)
    assert log_source(private, "stdout") == (private / "stdout", None)       # in the task's own /tmp: gone with it
    assert log_source(private, "stderr") == (Path("/srv/e.txt"), 1000)
    other = tmp_path / "other"
    other.mkdir()
    save_outputs(other, TaskOutputs(), "/srv", 0)           # no redirection: no record, the agent's logs
    assert log_source(other, "stdout") == (other / "stdout", None)


def test_logs_read_a_user_s_file_only_when_it_is_a_regular_file_of_the_task_s_user(tmp_path: Path) -> None:
    import asyncio
    import os

    from tcluster.agent import logfiles

    async def read(path: Path, owner: int | None) -> bytes:
        return b"".join([chunk async for chunk in logfiles.read(path, 0, 1 << 20, lambda: False, owner)])

    mine = tmp_path / "out.txt"
    mine.write_bytes(b"hello\n")
    uid = os.stat(mine).st_uid
    assert asyncio.run(read(mine, uid)) == b"hello\n"
    with pytest.raises(PermissionError, match="not owned by the task's user"):
        asyncio.run(read(mine, uid + 1))                 # e.g. a link swapped in to another user's file
    (tmp_path / "dir").mkdir()
    with pytest.raises(PermissionError, match="not a regular file"):
        asyncio.run(read(tmp_path / "dir", uid))
    assert asyncio.run(read(tmp_path / "gone.txt", uid)) == b""      # removed by its user: nothing to show
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PermissionError, match="not a regular file"):     # opened without blocking, then refused
        asyncio.run(read(fifo, uid))
