"""`--stdout-file` / `--stderr-file` patterns, as sbatch's `-o` / `-e`: checked at submit
(unknown `%` letters refused, naming them), expanded on the node for each task.

Slurm's letters: %j the job id, %A the array's master job id (an array is one job here: the
job id), %a the array index, %t the task index (an array task's index is its array index,
so %a and %t agree), %u the user the task runs as, %x the job's name, %N the node's name,
%% a percent sign. A
number between `%` and the letter zero-pads the value to that width (`%4t` -> 0007)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tcluster.domain.bounds import quote
from tcluster.domain.errors import InvalidArgument

LETTERS = "jtaAuxN%"
MAX_PATTERN_BYTES = 4096          # a path
MAX_PAD = 10                      # %10j at most: a width is for sorting, not for megabytes
_TOKEN = re.compile(r"%(\d*)(.?)", re.DOTALL)
ALLOWED = ("%j job id, %t task index, %a array index, %A array job id, %u user, %x job name, %N node, "
           "%% a percent")


@dataclass(frozen=True)
class OutputNames:
    """What a pattern's letters stand for, for one task."""
    job_id: str
    task_index: int
    user: str
    job_name: str
    node: str = ""


def check_pattern(field: str, pattern: str) -> None:
    """Raises InvalidArgument naming the field and the first bad `%` sequence."""
    if not pattern:
        return
    if len(pattern.encode("utf-8", "surrogatepass")) > MAX_PATTERN_BYTES:
        raise InvalidArgument(field, f"{quote(pattern)} is longer than {MAX_PATTERN_BYTES} bytes")
    if "\x00" in pattern:
        raise InvalidArgument(field, "contains a NUL byte")
    if pattern.endswith("/"):
        raise InvalidArgument(field, f"{quote(pattern)} names a directory; give a file, e.g. {pattern}out-%j.txt")
    for match in _TOKEN.finditer(pattern):
        width, letter = match.groups()
        if not letter:
            raise InvalidArgument(field, f"{quote(pattern)} ends with a lone %; write %% for a percent sign")
        if letter not in LETTERS:
            raise InvalidArgument(field, f"%{width}{letter} in {quote(pattern)} is not a pattern letter; allowed: "
                                         f"{ALLOWED}")
        if width and (int(width) > MAX_PAD or letter == "%"):
            raise InvalidArgument(field, f"%{width}{letter} in {quote(pattern)}: a width is 1..{MAX_PAD} before "
                                         "a letter other than %")


def expand(pattern: str, names: OutputNames) -> str:
    """The pattern with each letter replaced (the pattern was checked at submit)."""
    values = {"j": names.job_id, "A": names.job_id, "t": str(names.task_index), "a": str(names.task_index),
              "u": names.user, "x": names.job_name, "N": names.node, "%": "%"}

    def one(match: re.Match[str]) -> str:
        width, letter = match.groups()
        value = values.get(letter, match.group(0))
        return value.zfill(int(width)) if width and letter != "%" else value
    return _TOKEN.sub(one, pattern)


def names_each_task(pattern: str) -> bool:
    """Does the pattern give each task its own file (%t or %a)? Several tasks that share one
    file open it for appending, so that none truncates what another wrote."""
    return any(letter in "ta" for _, letter in _TOKEN.findall(pattern))
