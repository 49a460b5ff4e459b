"""`tcl submit run.sh`: the `#TCL` and `#SBATCH` lines at the top of a job script, as
`tcl submit` flags.

As sbatch reads them: from the top of the file (after the `#!` line), through comments and
blank lines, until the first line that is neither; later ones are ordinary comments. A
`#TCL` line holds `tcl submit` flags as written on the command line; a `#SBATCH` line holds
sbatch flags, taken where one means the same as a `tcl submit` flag (SBATCH_FLAGS below)
and refused, naming the flag and its line, otherwise. Pure: text in, words out."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable

from tcluster.domain.errors import InvalidArgument

TCL_PREFIX = "#TCL"
SBATCH_PREFIX = "#SBATCH"


@dataclass(frozen=True)
class Directive:
    line: int                    # 1-based
    words: tuple[str, ...]       # as `tcl submit` flags


def _slurm_size(value: str) -> str:
    """Slurm's --mem: a bare number is MiB, K/M/G/T are powers of 1024."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGTkmgt]?)[Bb]?\s*", value)
    if not match:
        return value                     # the size parser names what is wrong with it
    number, unit = match.groups()
    return f"{number}{(unit or 'M').upper()}i"


def _slurm_time(value: str) -> str:
    """Slurm's --time: a bare number is minutes (the other forms the duration parser reads)."""
    return f"{value.strip()}m" if value.strip().isdigit() else value


def _gres(value: str) -> tuple[str, str]:
    """--gres=gpu:N (or gpu, one GPU); other resources and typed GPUs are refused."""
    match = re.fullmatch(r"gpu(?::(\d+))?", value.strip())
    if not match:
        raise ValueError(f"only gpu[:N] is understood (typed GPUs and other resources: use #TCL --constraint "
                         f"and --gpus), not {value!r}")
    return "--gpus", match.group(1) or "1"


def _same(flag: str) -> Callable[[str], tuple[str, str]]:
    return lambda value: (flag, value)


def _converted(flag: str, convert: Callable[[str], str]) -> Callable[[str], tuple[str, str]]:
    return lambda value: (flag, convert(value))


# sbatch's flag (long and short names) -> the `tcl submit` flag with the value converted.
SBATCH_FLAGS: dict[str, Callable[[str], tuple[str, str]]] = {
    "--job-name": _same("--name"), "-J": _same("--name"),
    "--partition": _same("--queue"), "-p": _same("--queue"),
    "--cpus-per-task": _same("--cpu"), "-c": _same("--cpu"),
    "--mem": _converted("--mem", _slurm_size),
    "--time": _converted("--time-limit", _slurm_time), "-t": _converted("--time-limit", _slurm_time),
    "--array": _same("--array"), "-a": _same("--array"),
    "--output": _same("--stdout-file"), "-o": _same("--stdout-file"),
    "--error": _same("--stderr-file"), "-e": _same("--stderr-file"),
    "--open-mode": _same("--open-mode"),
    "--chdir": _same("--workdir"), "-D": _same("--workdir"),
    "--export": _same("--export"),
    "--dependency": _same("--dependency"), "-d": _same("--dependency"),
    "--gres": _gres,
    "--gpus": _same("--gpus"), "-G": _same("--gpus"),
}
# Flags whose sbatch meaning differs from anything tcl has: refused with the way out.
_HINTS = {
    "--ntasks": "an sbatch script runs once for all its tasks; a tcl job runs the script once per task: "
                "use #TCL --tasks N (or --array) to run it N times, or --cpu N for one task with N cores",
    "--nodes": "a tcl task runs on one node; use #TCL --tasks N --gang for N tasks started together",
    "--mem-per-cpu": "give the memory per task: --mem",
}
_HINTS.update({"-n": _HINTS["--ntasks"], "-N": _HINTS["--nodes"]})


def read_directives(text: str) -> list[Directive]:
    """The directives at the top of a script, each as `tcl submit` words."""
    found = []
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            break                               # the first command: no directive after it
        for prefix, convert in ((TCL_PREFIX, _tcl_words), (SBATCH_PREFIX, _sbatch_words)):
            if stripped.startswith(prefix) and (len(stripped) == len(prefix) or stripped[len(prefix)].isspace()):
                words = _split(stripped[len(prefix):], number)
                found.append(Directive(number, tuple(convert(words, number))))
    return found


def _split(text: str, line: int) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise InvalidArgument(f"line {line}", f"cannot split the directive into words: {exc}") from None


def _tcl_words(words: list[str], line: int) -> list[str]:
    for word in words:
        flag = word.partition("=")[0]
        if flag in ("-o", "--output", "-e", "--error"):
            raise InvalidArgument(f"line {line}", f"{flag} in a #TCL line: write --stdout-file/--stderr-file (in "
                                                  "tcl, -o is the output format), or #SBATCH -o/-e")
    if "--" in words or any(not w.startswith("-") for w in words[:1]):
        raise InvalidArgument(f"line {line}", "a #TCL line holds `tcl submit` flags (e.g. #TCL --cpu 2 --mem 4G); "
                                              "the command is the script itself")
    return words


def _sbatch_words(words: list[str], line: int) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        flag, value, i = _next_sbatch_option(words, i, line)
        convert = SBATCH_FLAGS.get(flag)
        if convert is None:
            why = _HINTS.get(flag, f"tcl has no flag of the same meaning; allowed: {', '.join(_long_flags())}, "
                                   "or a #TCL line with `tcl submit` flags")
            raise InvalidArgument(f"line {line}", f"#SBATCH {flag} is not supported: {why}")
        try:
            out.extend(convert(value))
        except ValueError as exc:
            raise InvalidArgument(f"line {line}", f"#SBATCH {flag}: {exc}") from None
    return out


def _next_sbatch_option(words: list[str], i: int, line: int) -> tuple[str, str, int]:
    """(flag, value, next index) for --flag=value, --flag value, -Xvalue and -X value."""
    word = words[i]
    if not word.startswith("-") or word in ("-", "--"):
        raise InvalidArgument(f"line {line}", f"#SBATCH expects flags, not {word!r}")
    if word.startswith("--"):
        flag, sep, value = word.partition("=")
        if sep:
            return flag, value, i + 1
    elif len(word) > 2:
        return word[:2], word[2:], i + 1
    else:
        flag = word
    if flag not in SBATCH_FLAGS:
        return flag, "", i + 1                  # refused by the caller, naming it
    if i + 1 >= len(words):
        raise InvalidArgument(f"line {line}", f"#SBATCH {flag} needs a value")
    return flag, words[i + 1], i + 2


def _long_flags() -> list[str]:
    return sorted(flag for flag in SBATCH_FLAGS if flag.startswith("--"))
