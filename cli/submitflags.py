"""`tcl submit`'s options: one per job spec field that has a flag, made from the field
table (tcluster/domain/specfields.py, which cli/spec.py reads them back by), and the few of its
own (resources, the job file, --wait, the command). Light on purpose: the parser is built
for every `tcl` command, `tcl --help` included."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from tcluster.cli.options import DEFAULT_CPU, DEFAULT_MEMORY, non_negative_int
from tcluster.domain.specfields import SPEC_FIELDS, Kind, SpecField

# `tcl submit --help` lists its options in the order it always has; an option of a field
# added since comes after these, with nothing to add here.
HELP_ORDER = ("--name", "--queue", "--weight", "--tasks", "--cpu", "--mem", "--resources", "--env", "--export", "--label", "--user",
              "--workdir", "--cpu-limit", "--swap", "--pids-max", "--image", "--network", "--net", "--net-limit",
              "--retries", "--log-max", "--constraint", "--file", "--wait", "--request-id")


# What argparse converts; the other kinds stay text and are parsed when the spec is
# merged (cli/spec.py), so that their errors name the flag the way the units' parsers do.
_FLAG_TYPES: dict[Kind, Callable[[str], Any]] = {
    Kind.COUNT: int,
    Kind.NATURAL: non_negative_int,
    Kind.WEIGHT: float,
}
_REPEATED = (Kind.PAIRS, Kind.LIST)      # each use adds one
# Options that are no one spec field: (names, argparse options).
_OWN: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "--cpu": (("--cpu",), {"help": f"cores per task: 0.5, 2 or 500m (default: {DEFAULT_CPU})"}),
    "--mem": (("--mem",), {"help": f"memory per task; a bare number is MiB as in Slurm (4096), or 512M, 4G, 1.5Gi, "
                                  f"500MB, or unlimited (a node may refuse it) (default: {DEFAULT_MEMORY})"}),
    "--resources": (("--resources",), {
        "metavar": "SPEC", "help": "per task, the paper's form: 'cpu_num=0.5; memory=0.5GB; net=10Mbit'"}),
    "--net": (("--net",), {
        "metavar": "RATE", "help": "egress bandwidth per task, e.g. 50Mbit (implies --network bridge)"}),
    "--gpus": (("--gpus",), {
        "metavar": "N", "type": non_negative_int,
        "help": "whole GPUs per task, bound to devices of its node (CUDA_VISIBLE_DEVICES) (default: 0)"}),
    "--file": (("-f", "--file"), {
        "metavar": "JOB.yaml",
        "help": "job file: name, queue, tasks, resources, command, env, user, workdir, labels, constraints"}),
    "--export": (("--export",), {
        "metavar": "ALL|NONE|VAR[,VAR=value...]",
        "help": "the submitting shell's variables a task gets, as Slurm's --export: ALL (default: all but a "
                "deny-list such as TCL_TOKEN, SSH_AUTH_SOCK, DISPLAY, HOME), NONE, or only the ones listed"}),
    "--wait": (("--wait",), {
        "action": "store_true", "help": "wait until the job ends (progress on stderr); exit 0 only if it SUCCEEDED"}),
    # Dependencies by kind, joined into --dependency's form (cli/spec.py).
    "--after-ok": (("--after-ok",), {"metavar": "J[,J...]", "action": "append",
                                     "help": "start only after these jobs SUCCEEDED"}),
    "--after-any": (("--after-any",), {"metavar": "J[,J...]", "action": "append",
                                       "help": "start only after these jobs ended, however"}),
    "--after-notok": (("--after-notok",), {"metavar": "J[,J...]", "action": "append",
                                           "help": "start only after these jobs FAILED or were CANCELLED"}),
}


def add_submit_options(parser: argparse.ArgumentParser) -> None:
    by_flag = {entry.flag: entry for entry in SPEC_FIELDS if entry.flag is not None}
    last = len(HELP_ORDER)
    ranked = sorted([*by_flag, *_OWN], key=lambda flag: HELP_ORDER.index(flag) if flag in HELP_ORDER else last)
    for flag in ranked:
        if flag in by_flag:
            parser.add_argument(flag, **_options(by_flag[flag]))
        else:
            names, options = _OWN[flag]
            parser.add_argument(*names, **options)
    parser.add_argument("command", nargs="*", metavar="COMMAND", help="the program and its arguments, after `--`")


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
    elif entry.kind is Kind.FLAG:
        options["action"] = "store_const"     # None when absent: the job file's value stands
        options["const"] = True
    return options
