"""`make docs`: the reference pages under docs/reference, generated from the code so that
they cannot drift from it. Each page is read from the one place the program itself reads:

- cli.md: the argparse parsers of tcl, tcl-master, tcl-agent and tcl-gm (cli/parsertree.py,
  the walk shell completion and the man pages use);
- job-file.md: the job spec's field table (tcluster/domain/specfields.py), which
  `tcl submit -f` reads through;
- queue-file.md: the keys the queue file parser accepts (scheduler/queues.py, quotas.py);
- config.md: the `--config` TOML keys each daemon accepts (tcluster/daemonkit/configfile.py
  over the daemon's parser, which feeds its pydantic settings model), with the model's default;
- metrics.md: the series the master's /metrics serves (master/usage/metrics.py's families,
  the task usage table's series, the GPU series).

tests/unit/test_docs.py regenerates every page and fails when one differs from the
checked-in copy: run `make docs` after changing a flag, a key or a metric.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tcluster.cli.parsertree import PROGRAMS, Command, Option
from tcluster.cli.refdocs_tables import GENERATED, cell, config_page, job_file_page, metrics_page, queue_file_page

USAGE_COLUMNS = "100"       # argparse wraps usage lines at $COLUMNS: fixed, so the page is the same everywhere


def anchor(command: Command) -> str:
    """GitHub's anchor of the command's heading (`## tcl node cordon`)."""
    return "-".join(command.path)


def flags_of(option: Option) -> str:
    return ", ".join(f"`{flag}`" for flag in option.flags)


def option_row(option: Option) -> str:
    value = f"`{option.metavar}`" if option.takes_value else ""
    notes = [option.help]
    if option.choices:
        notes.append("one of: " + ", ".join(f"`{c}`" for c in option.choices))
    if option.repeatable:
        notes.append("repeatable")
    return f"| {flags_of(option)} | {value} | {cell('; '.join(n for n in notes if n))} |"


def command_section(command: Command) -> list[str]:
    out = [f"## {command.name}", ""]
    about = command.description or command.help
    if about:
        out += [" ".join(about.split()), ""]
    out += ["```text", command.usage, "```", ""]
    if command.positionals:
        out += ["| argument | what |", "|---|---|"]
        out += [f"| `{p.name}` | {cell(p.help)} |" for p in command.positionals] + [""]
    if command.options:
        out += ["| flag | value | what |", "|---|---|---|"]
        out += [option_row(option) for option in command.options] + [""]
    if command.subcommands:
        out += ["Commands: " + ", ".join(f"[{s.path[-1]}](#{anchor(s)})" for s in command.subcommands), ""]
    return out


@contextmanager
def usage_width() -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = USAGE_COLUMNS
    try:
        yield
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def command_trees() -> list[Command]:
    with usage_width():
        return [build() for _section, build in PROGRAMS.values()]


def cli_page() -> str:
    trees = command_trees()
    out = ["# CLI reference", "", GENERATED, "",
           "Every command and flag of the four programs, as their parsers define them (`--help` "
           "prints the same; `man tcl`, `man tcl-master` ... from the package).", ""]
    out += [f"- [{tree.name}](#{anchor(tree)})" for tree in trees] + [""]
    for tree in trees:
        for command in tree.walk():
            out += command_section(command)
    return "\n".join(out).rstrip() + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page,
    "job-file.md": job_file_page,
    "queue-file.md": queue_file_page,
    "config.md": config_page,
    "metrics.md": metrics_page,
}


def generate() -> dict[str, str]:
    """File name -> its text, for every reference page."""
    return {name: page() for name, page in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tcluster.cli.refdocs",
                                     description="write the reference pages generated from the code")
    parser.add_argument("out_dir", type=Path, help="where to write them (docs/reference)")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (args.out_dir / name).write_text(text)
        print(args.out_dir / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
