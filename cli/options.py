"""What `tcl`'s parser and its commands share: exit codes, environment variable names,
built-in defaults, choices and a type check. Plain values, importable without grpc, protobuf or YAML,
so that cli/main.py builds every subcommand's parser before any command is imported."""

from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

DEFAULT_WAIT_LEADER_S = 10.0
WAIT_LEADER_ENV = "TCL_WAIT_LEADER_S"

# Nomad-style defaults so `tcl submit -- cmd` just works; a kind given as 0 in a file or
# in --resources counts as not given (an explicit --cpu 0 / --mem 0 is honoured).
DEFAULT_CPU = "1"
DEFAULT_MEMORY = "512Mi"

# `tcl pack --order`: the orders pack/schedule.py knows, named here so that the parser
# need not import numpy and the scheduler to print them.
PACK_ORDERS = ("arrival", "cpu", "mem", "sum")


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value
