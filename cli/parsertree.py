"""The command tree of tcl and of each daemon, read from their argparse parsers.

Shell completion (cli/completion.py) and the man pages (cli/manpages.py) are generated from
this one walk, so a flag added to a parser appears in both without being listed anywhere
else. argparse keeps its actions in private attributes (`_actions`, `_SubParsersAction`);
they have been stable since Python 3.2, and tests/unit/test_completion_manpages.py fails
the day they are not.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]            # e.g. ("-o", "--output")
    help: str
    takes_value: bool
    metavar: str                      # what the value is, "" for a switch
    choices: tuple[str, ...] = ()
    repeatable: bool = False          # append/count: may be given more than once


@dataclass(frozen=True)
class Positional:
    name: str
    help: str
    choices: tuple[str, ...] = ()
    many: bool = False                # nargs * + or REMAINDER (e.g. the command after --)


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]             # ("tcl",), ("tcl", "node", "cordon")
    help: str                         # the one line its parent lists
    description: str
    epilog: str
    usage: str
    options: tuple[Option, ...]
    positionals: tuple[Positional, ...]
    subcommands: tuple[Command, ...] = field(default=())

    @property
    def name(self) -> str:
        return " ".join(self.path)

    def walk(self) -> list[Command]:
        """This command and every one below it, depth first."""
        return [self, *(c for sub in self.subcommands for c in sub.walk())]


def help_text(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    """The action's help with %(default)s and friends filled in, as `--help` prints it."""
    text = action.help or ""
    if "%" not in text:
        return text
    values = {**vars(action), "prog": parser.prog}
    values = {k: (v.__name__ if hasattr(v, "__name__") else v) for k, v in values.items()}
    try:
        return text % values
    except (KeyError, TypeError, ValueError):
        return text


def option_of(action: argparse.Action, parser: argparse.ArgumentParser) -> Option:
    takes_value = action.nargs != 0
    choices = tuple(str(c) for c in action.choices) if action.choices and takes_value else ()
    metavar = action.metavar if isinstance(action.metavar, str) else \
        "{" + ",".join(choices) + "}" if choices else action.dest.upper()     # as --help names it
    repeatable = isinstance(action, (argparse._AppendAction, argparse._CountAction, argparse._ExtendAction))
    return Option(tuple(action.option_strings), help_text(action, parser), takes_value,
                  metavar if takes_value else "", choices, repeatable)


def positional_of(action: argparse.Action, parser: argparse.ArgumentParser) -> Positional:
    name = action.metavar if isinstance(action.metavar, str) else action.dest
    choices = tuple(str(c) for c in action.choices) if action.choices else ()
    many = action.nargs in ("*", "+", argparse.REMAINDER)
    return Positional(name, help_text(action, parser), choices, many)


def command_tree(parser: argparse.ArgumentParser, path: tuple[str, ...], help: str = "",
                 extra: tuple[Command, ...] = ()) -> Command:
    """The Command for `parser` and its subparsers; `extra`: subcommands parsed elsewhere
    (a daemon's offline commands, which its main() hands to another parser)."""
    options: list[Option] = []
    positionals: list[Positional] = []
    subcommands: list[Command] = list(extra)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            subcommands.extend(_subcommands(action, path))
        elif action.option_strings:
            options.append(option_of(action, parser))
        else:
            positionals.append(positional_of(action, parser))
    return Command(path, help, parser.description or "", parser.epilog or "", usage_of(parser),
                   tuple(options), tuple(positionals), tuple(subcommands))


def usage_of(parser: argparse.ArgumentParser) -> str:
    """The usage line(s) without "usage: ", continuation lines indented by four."""
    lines = parser.format_usage().removeprefix("usage: ").strip().split("\n")
    return "\n".join([lines[0], *("    " + line.strip() for line in lines[1:])])


def _subcommands(action: argparse._SubParsersAction, path: tuple[str, ...]) -> list[Command]:
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return [command_tree(sub, (*path, name), helps.get(name, ""))
            for name, sub in action.choices.items()]


def _tcl() -> Command:
    from tcluster.cli.main import build_parser
    return command_tree(build_parser(None), ("tcl",))


def _master() -> Command:
    from tcluster.master.app.main import build_admin_parser, build_parser
    admin = command_tree(build_admin_parser(), ("tcl-master",))
    return command_tree(build_parser(), ("tcl-master",), extra=admin.subcommands)


def _agent() -> Command:
    from tcluster.agent.joincmd import build_parser as join_parser
    from tcluster.agent.main import build_parser
    join = command_tree(join_parser(), ("tcl-agent", "join"), "join the cluster with a join token (once per node)")
    return command_tree(build_parser(), ("tcl-agent",), extra=(join,))


def _gm() -> Command:
    from tcluster.gm.queuescmd import _parser as queues_parser
    from tcluster.gm.settings import build_parser
    queues = command_tree(queues_parser(), ("tcl-gm", "queues"), "show or change the queue -> home GM map in etcd")
    return command_tree(build_parser(), ("tcl-gm",), extra=(queues,))


# Program -> (man section, how to build its tree). The trees import the daemons' modules:
# only the generators call these, never `tcl` itself at run time.
PROGRAMS: dict[str, tuple[int, Callable[[], Command]]] = {
    "tcl": (1, _tcl), "tcl-master": (8, _master), "tcl-agent": (8, _agent), "tcl-gm": (8, _gm),
}
