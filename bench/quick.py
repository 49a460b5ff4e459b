"""`--quick` for every bench: toy sizes and one round, a smoke run of the bench's real code
path end to end that prints its usual table (its figures mean nothing at that size).
tests/bench/test_benches_quick.py runs each bench so, so that a function that moved breaks
`make test` the day it moves, not the next time someone wants the README's figures.
Flags given on the command line still win over the toy sizes."""

from __future__ import annotations

import argparse
from typing import Any, Sequence


def parse_args(parser: argparse.ArgumentParser, toy: dict[str, Any],
               argv: Sequence[str] | None = None) -> argparse.Namespace:
    """parser.parse_args(argv), with a --quick flag that makes `toy` (dest -> value) the
    defaults: explicit flags still count."""
    sizes = ", ".join(f"{key.replace('_', '-')} {value}" for key, value in toy.items())
    parser.add_argument("--quick", action="store_true",
                        help=f"toy sizes, one round: a smoke run, not figures ({sizes})")
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**toy)
        args = parser.parse_args(argv)
    return args
