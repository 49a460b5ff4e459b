"""`tcl submit run.sh [ARG...]`: a job script, as sbatch takes one.

Without `--`, a first word that names a file here is a script: its `#TCL`/`#SBATCH`
directives (cli/directives.py) are read as `tcl submit` flags, flags on the command line
override them (lists such as --env add to them), and its text goes with the job, to be run
on the node by its `#!` interpreter; the command shown is the script's name and arguments.
With `--` (`tcl submit -- ./run.sh`) the words are a command to run as they are."""

from __future__ import annotations

import argparse
import posixpath
import re
from pathlib import Path
from typing import Any, NoReturn

from tcluster.cli.directives import Directive, read_directives
from tcluster.cli.submitflags import add_submit_options
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.scripts import MAX_SCRIPT_BYTES

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class _DirectiveParser(argparse.ArgumentParser):
    """`tcl submit`'s flags for one directive line: an error names the line, never exits."""

    def __init__(self, where: str) -> None:
        super().__init__(prog=where, add_help=False, allow_abbrev=False)
        self.where = where
        add_submit_options(self)

    def error(self, message: str) -> NoReturn:
        raise InvalidArgument(self.where, message)


def is_script_submit(args: argparse.Namespace) -> bool:
    return (not getattr(args, "dashdash", True) and bool(args.command) and not getattr(args, "file", None)
            and Path(args.command[0]).is_file())


def read_script(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
        if len(data) > MAX_SCRIPT_BYTES:
            raise InvalidArgument(path, f"the script is larger than {MAX_SCRIPT_BYTES // 1024} KiB, the most a job "
                                        "carries; keep data in files the script reads")
        return data.decode("utf-8")
    except OSError as exc:
        raise InvalidArgument(path, f"cannot read the script: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(path, "the script is not UTF-8 text") from None


def with_script(args: argparse.Namespace) -> argparse.Namespace:
    """The submit's arguments with the script's directives under them and its text in
    `script_text` (unchanged when the submit names no script)."""
    if not is_script_submit(args):
        return args
    path = args.command[0]
    text = read_script(path)
    merged = argparse.Namespace(**{k: (None if k in _APPEND_DESTS else v) for k, v in vars(args).items()})
    for directive in read_directives_of(path, text):      # in order: a later line wins
        _overlay(merged, _parse_directive(path, directive))
    _overlay(merged, args)                     # the command line wins over every directive
    merged.script_text = text
    if not merged.name:
        merged.name = default_name(path)
    return merged


def read_directives_of(path: str, text: str) -> list[Directive]:
    try:
        return read_directives(text)
    except InvalidArgument as exc:
        raise InvalidArgument(path, str(exc)) from None


def default_name(path: str) -> str | None:
    """Slurm names a job after its script: the file's name, when it is a valid job name."""
    base = posixpath.basename(path)
    return base if _NAME.match(base) else None


def _parse_directive(path: str, directive: Directive) -> argparse.Namespace:
    parser = _DirectiveParser(f"{path}: line {directive.line}")
    given = parser.parse_args(list(directive.words))
    if given.command:
        raise InvalidArgument(parser.where, f"unexpected word {given.command[0]!r}: a directive holds flags only")
    return given


def _overlay(merged: argparse.Namespace, layer: argparse.Namespace) -> None:
    """Set on `merged` every flag `layer` gives (not None, not False, not empty); a list
    (--env, --label, --constraint, ...) adds to what `merged` has."""
    for dest, value in vars(layer).items():
        if dest == "command" or not _given(value):
            continue
        if dest in _APPEND_DESTS:
            setattr(merged, dest, [*(getattr(merged, dest, None) or []), *value])
        else:
            setattr(merged, dest, value)


def _given(value: Any) -> bool:
    return value is not None and value is not False and value != []


def _append_dests() -> frozenset[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_submit_options(parser)
    return frozenset(action.dest for action in parser._actions if isinstance(action, argparse._AppendAction))


_APPEND_DESTS = _append_dests()
