"""`tcl submit`'s options for job spec fields, made from the field table
(tcluster/specfields.py); cli/spec.py reads them back by the same table. Light on purpose:
the parser is built for every `tcl` command, `tcl --help` included."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from tcluster.specfields import SPEC_FIELDS, Kind, SpecField


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


# What argparse converts; the other kinds stay text and are parsed when the spec is
# merged (cli/spec.py), so that their errors name the flag the way the units' parsers do.
_FLAG_TYPES: dict[Kind, Callable[[str], Any]] = {
    Kind.COUNT: int,
    Kind.NATURAL: non_negative_int,
    Kind.WEIGHT: float,
}
_REPEATED = (Kind.PAIRS, Kind.LIST)      # each use adds one


def add_spec_flags(parser: argparse.ArgumentParser) -> None:
    """One option per table field that has a flag, in the table's order."""
    for entry in SPEC_FIELDS:
        if entry.flag is not None:
            parser.add_argument(entry.flag, **_options(entry))


def _options(entry: SpecField) -> dict[str, Any]:
    options: dict[str, Any] = {"help": entry.help}
    if entry.metavar:
        options["metavar"] = entry.metavar
    if entry.choices:
        options["choices"] = entry.choices
    if entry.kind in _REPEATED:
        options["action"] = "append"
    elif entry.kind in _FLAG_TYPES:
        options["type"] = _FLAG_TYPES[entry.kind]
    return options
