"""The shell examples of the README and of the docs/ pages (`user_pages`; the generated
docs/reference is checked by tests/unit/test_docs.py instead), as the tests read them: every ```sh block, each logical line
(backslash continuations joined), and inside it every invocation of tcl, tcl-master,
tcl-agent or tcl-gm (also `.venv/bin/tcl`, after `VAR=$(`, `|`, `;`, `&&`, `sudo`).

A line is a *synopsis* when it has `[...]` (optional parts, `a | b` alternatives): its flags
are checked against the parser, but it is not parsed whole nor run. Every other invocation
is parsed by the program's real parser (`parse`), with the README's placeholders (ID, JOB,
$PREP ...) standing for a job id. tests/unit/test_readme_examples.py parses them all;
tests/e2e/test_readme_examples.py runs those that can run on one node.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tcluster.cli.parsertree import Command

PROGRAMS = ("tcl", "tcl-master", "tcl-agent", "tcl-gm")
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "<", ">", ">&"}
PLACEHOLDER_ID = "0123abcd"
# What a $VARIABLE of the README stands for when an example is parsed (not run).
VARIABLES = {"STORE": "etcd://127.0.0.1:2379", "TCL_MASTER": "127.0.0.1:7070,127.0.0.1:7072"}
ID_WORDS = {"ID", "JOB"}
COMMAND_START = re.compile(r"\s*(\S*/)?(tcl|tcl-master|tcl-agent|tcl-gm)\s")


def user_pages(repo: Path) -> list[tuple[str, str]]:
    """(path relative to the repository, text) of README.md and every docs/*.md page, the
    README first (its first job is the one `tcl logs ID` prints 42 for), then by name."""
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    return [(str(page.relative_to(repo)), page.read_text()) for page in pages]


@dataclass(frozen=True)
class Invocation:
    line: int                 # README line number where the logical line starts
    text: str                 # the logical line as written
    argv: tuple[str, ...]     # program name first (a path's basename), as the shell would pass them
    synopsis: bool            # has [optional] parts: flags checked, not parsed or run

    @property
    def program(self) -> str:
        return self.argv[0]


def sh_blocks(readme: str) -> list[tuple[int, list[str]]]:
    """(line number of the block's first line, its lines) for each ```sh block, and of each
    untagged block the lines that start with a program (`tcl report ...`; not its output)."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    start, tag = 0, ""
    for number, line in enumerate(readme.split("\n"), start=1):
        if current is None and line.strip().startswith("```"):
            current, start, tag = [], number + 1, line.strip()[3:]
        elif current is not None and line.strip().startswith("```"):
            if tag in ("sh", "bash", "shell"):
                blocks.append((start, current))
            elif tag == "":
                blocks.append((start, [text if COMMAND_START.match(text) else "" for text in current]))
            current = None
        elif current is not None:
            current.append(line.removeprefix("$ "))
    return blocks


def logical_lines(start: int, lines: list[str]) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined; comment-only and blank lines dropped."""
    out: list[tuple[int, str]] = []
    pending, first = "", start
    for offset, line in enumerate(lines):
        if not pending:
            first = start + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text and not text.startswith("#"):
            out.append((first, text))
    return out


def words(text: str) -> list[str]:
    """Shell words and separators (`$(` read as `(`); `# comments` dropped."""
    lexer = shlex.shlex(text.replace("$(", " ( "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def invocations_in(number: int, text: str) -> list[Invocation]:
    found: list[Invocation] = []
    segment: list[str] = []
    for word in [*words(text), ";"]:
        if word not in SEPARATORS:
            segment.append(word)
            continue
        while segment and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]) or segment[0] == "sudo"):
            segment = segment[1:]     # VAR=value before a command, or sudo
        if segment and Path(segment[0]).name in PROGRAMS:
            argv = (Path(segment[0]).name, *segment[1:])
            found.append(Invocation(number, text, argv, any("[" in w or "]" in w for w in argv)))
        elif segment and segment[0].startswith("-") and found:     # `tcl top --nodes | --queues`: alternatives
            found[-1] = Invocation(number, text, (*found[-1].argv, *segment), True)
        segment = []
    return found


def readme_invocations(readme: str) -> list[Invocation]:
    return [inv for start, lines in sh_blocks(readme) for number, text in logical_lines(start, lines)
            for inv in invocations_in(number, text)]


def placeholders_filled(argv: tuple[str, ...]) -> list[str]:
    """The README's stand-ins replaced by values of the right form, for parsing."""
    out = []
    for word in argv[1:]:
        if word in ID_WORDS:
            word = PLACEHOLDER_ID
        word = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: VARIABLES.get(m.group(1), PLACEHOLDER_ID), word)
        out.append(word)
    return out


def parser_for(program: str, args: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The parser the program's main() would hand these arguments to, and what it parses."""
    if program == "tcl":
        from tcluster.cli.main import build_parser
        return build_parser(args), args
    if program == "tcl-master":
        from tcluster.master.app.main import build_admin_parser, build_parser as master
        return (build_admin_parser() if args and not args[0].startswith("-") else master()), args
    if program == "tcl-agent":
        from tcluster.agent.joincmd import build_parser as join
        from tcluster.agent.main import build_parser as agent
        return (join(), args[1:]) if args[:1] == ["join"] else (agent(), args)
    from tcluster.gm.queuescmd import _parser as queues
    from tcluster.gm.settings import build_parser as gm
    return (queues(), args[1:]) if args[:1] == ["queues"] else (gm(), args)


def parse(invocation: Invocation) -> str | None:
    """None if the program's parser takes the example, else what argparse said."""
    args = placeholders_filled(invocation.argv)
    parser, parsed = parser_for(invocation.program, args)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(parsed)
    except SystemExit as exit_:
        return None if exit_.code == 0 else errors.getvalue().strip() or f"exit {exit_.code}"
    return None


@functools.cache
def command_tree(program: str) -> Command:
    from tcluster.cli.parsertree import PROGRAMS as TREES
    return TREES[program][1]()


def unknown_flags(invocation: Invocation) -> list[str]:
    """The subcommand and flags of the example (synopses too) that its program does not have."""
    command = command_tree(invocation.program)
    unknown: list[str] = []
    skip_value = False
    for word in (w.strip("[]") for w in invocation.argv[1:]):
        if word == "--":
            break
        options = {flag: opt for opt in command.options for flag in opt.flags}
        subcommand = next((sub for sub in command.subcommands if sub.path[-1] == word), None)
        if skip_value:
            skip_value = False
        elif subcommand is not None:
            command = subcommand
        elif re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):
            flag = word.split("=", 1)[0]
            combined = not flag.startswith("--") and all(f"-{c}" in options for c in flag[1:])   # -it: -i -t
            if flag not in options and not combined:
                unknown.append(f"{command.name}: {flag}")
            skip_value = flag in options and options[flag].takes_value and "=" not in word
        elif command.subcommands and not word.isupper():    # COMMAND: a placeholder in prose
            unknown.append(f"{command.name}: no command {word!r}")
            break
    return unknown


def inline_invocations(markdown: str) -> list[Invocation]:
    """`tcl ...` in backticks in the prose (and in tables): each as a synopsis, for its flags."""
    found = []
    for number, line in enumerate(markdown.split("\n"), start=1):
        for span in re.findall(r"`((?:\S*/)?tcl(?:-master|-agent|-gm)? [^`]*)`", line):
            try:
                found += [Invocation(number, span, inv.argv, True) for inv in invocations_in(number, span)]
            except ValueError:      # not shell (an unbalanced quote in prose)
                continue
    return found
