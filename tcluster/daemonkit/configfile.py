"""`--config FILE` for the daemons: a TOML file whose keys are the daemon's long flags
with `_` for `-` (`heartbeat_interval_s = 0.5`, `memory = "8Gi"`, `[labels]` as a table),
values in the forms the flags take. Precedence: a flag given on the command line wins over
the file, the file over the defaults. The merged values go through the same parsing and
the same pydantic settings model as flags, so a file can say nothing a flag cannot.

Errors name the file, the line and the key: an unknown key (with the nearest known one),
a value of the wrong type (with what is allowed), a value the settings refuse. Negative
flags read positively in a file: `--no-namespaces` is `namespaces = false`.

A daemon may name `structured` keys, whose value may also be a TOML table or array, handed
to its settings as it is (tcl-gm's `[queue_map]`, `[shares]`), and may accept keys spelt
with `-` for `_` (`dashes`; tcl-gm's files always could)."""

from __future__ import annotations

import argparse
import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

# Flags that make no sense in a file: the file itself, and help/version.
NOT_IN_FILE = frozenset({"config", "help", "version"})
_KEY = re.compile(r'^\s*(["\']?)([A-Za-z0-9_-]+)\1\s*[.=]')
_TABLE = re.compile(r'^\s*\[\s*(["\']?)([A-Za-z0-9_-]+)\1')


class ConfigError(Exception):
    """A config file that cannot be used; the message names file, line and key."""


@dataclass(frozen=True)
class Option:
    key: str                      # as written in the file
    action: argparse.Action
    negated: bool = False         # a --no-X flag, read as `X = false`
    structured: bool = False      # a TOML table or array is kept as it is, for the settings to check

    @property
    def dest(self) -> str:
        return self.action.dest

    def allowed(self) -> str:
        """What a value of this key may be, in words."""
        action = self.action
        if self.negated or isinstance(action, argparse._StoreTrueAction):
            return "true or false"
        if action.choices:
            return "one of: " + ", ".join(str(c) for c in action.choices)
        kinds: dict[object, str] = {float: "a number", int: "an integer"}
        kind = kinds.get(action.type, "a string")
        if self.key == "labels":
            return "a string k=v,k2=v2 or a table of strings"
        return kind + (f" ({action.metavar})" if isinstance(action.metavar, str) else "")


@dataclass(frozen=True)
class ConfigFile:
    path: Path
    values: dict[str, Any]                           # dest -> value, as argparse would hold it
    lines: dict[str, int] = field(default_factory=dict)   # file key -> line
    keys: dict[str, str] = field(default_factory=dict)    # dest -> file key

    def where(self, dest: str) -> str | None:
        """'FILE:LINE: key' when dest came from this file, else None."""
        key = self.keys.get(dest)
        if key is None:
            return None
        return f"{self.path}:{self.lines.get(key, 0)}: {key}"


@dataclass(frozen=True)
class Loaded:
    """A daemon's arguments: command line over file over defaults."""
    args: argparse.Namespace
    argv: tuple[str, ...]
    explicit: frozenset[str]                         # dests given on the command line
    config: ConfigFile | None

    def origin(self, name: str) -> str | None:
        """Where a value that failed a check came from, when it was the file. `name` is a
        flag's dest or a settings field (`memory_bytes` is set by `memory`)."""
        if self.config is None:
            return None
        for dest in (name, name.removesuffix("_bytes"), name.removesuffix("_file"), f"no_{name}"):
            if dest in self.config.keys:
                return None if dest in self.explicit else self.config.where(dest)
        return None


def options(parser: argparse.ArgumentParser, structured: frozenset[str] = frozenset()) -> dict[str, Option]:
    """File key -> option, for every long flag of the parser."""
    out: dict[str, Option] = {}
    for action in parser._actions:
        if action.dest in NOT_IN_FILE or not action.option_strings or action.dest is argparse.SUPPRESS:
            continue
        if action.dest.startswith("no_") and isinstance(action, argparse._StoreFalseAction):
            continue        # `--X` beside `--no-X`: the file's `X = true` says it
        if action.dest.startswith("no_") and isinstance(action, argparse._StoreTrueAction):
            out[action.dest[3:]] = Option(action.dest[3:], action, negated=True)
        else:
            out[action.dest] = Option(action.dest, action, structured=action.dest in structured)
    return out


def key_lines(text: str) -> dict[str, int]:
    """Line of each top-level key or table (the first one); good enough for error messages."""
    lines: dict[str, int] = {}
    table: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if match := _TABLE.match(line):
            table = match.group(2)
            lines.setdefault(table, number)
        elif table is None and (match := _KEY.match(line)):
            lines.setdefault(match.group(2), number)
    return lines


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table",
            list: "an array"}.get(type(value), type(value).__name__)


def convert(option: Option, value: object) -> Any:
    """The value as argparse would have stored it; ValueError says what is wrong."""
    action = option.action
    if option.negated or isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_type_name(value)}")
        return not value if option.negated else value
    if option.key == "labels" and isinstance(value, dict):
        if not all(isinstance(v, str) for v in value.values()):
            raise ValueError("every label's value must be a string")
        return ",".join(f"{k}={v}" for k, v in value.items())
    if option.structured and isinstance(value, (dict, list)):
        return value
    if isinstance(value, (bool, dict, list)) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {option.allowed()}, got {_type_name(value)}")
    if action.type in (int, float) and isinstance(value, str):
        raise ValueError(f"expected {option.allowed()}, got a string")
    if action.type is int and isinstance(value, float):
        raise ValueError(f"expected {option.allowed()}, got a number with a fraction")
    text = value if isinstance(value, str) else repr(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (ValueError, TypeError, argparse.ArgumentTypeError) as error:
        raise ValueError(f"{text!r} is not {option.allowed()} ({error})") from None
    if action.choices and converted not in action.choices:
        raise ValueError(f"{text!r} is not {option.allowed()}")
    return converted


def load_config(path: Path, parser: argparse.ArgumentParser, structured: frozenset[str] = frozenset(),
                dashes: bool = False) -> ConfigFile:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config file: {error.strerror or error}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    known, lines = options(parser, structured), key_lines(text)
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, value in data.items():
        line = lines.get(key, 0)
        option = known.get(key.replace("-", "_") if dashes else key)
        if option is None:
            near = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {near[0]}?" if near else f"; known keys: {', '.join(sorted(known))}"
            raise ConfigError(f"{path}:{line}: unknown key {key!r}{hint}")
        try:
            values[option.dest] = convert(option, value)
        except ValueError as error:
            raise ConfigError(f"{path}:{line}: {key}: {error}") from None
        keys[option.dest] = key
    return ConfigFile(path, values, lines, keys)


def explicit_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The dests the command line itself sets (parsed again with every default suppressed)."""
    saved = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        given = parser.parse_args(list(argv))
    finally:
        for action, default in saved:
            action.default = default
    return frozenset(vars(given))


def load_args(parser: argparse.ArgumentParser, argv: Sequence[str], structured: frozenset[str] = frozenset(),
              dashes: bool = False) -> Loaded:
    """Parses argv (argparse exits on a bad flag), then lays the config file under it
    (`structured`, `dashes`: see the module's docstring)."""
    args = parser.parse_args(list(argv))
    explicit = explicit_dests(parser, argv)
    config_path = getattr(args, "config", None)
    config = load_config(Path(config_path), parser, structured, dashes) if config_path else None
    if config is not None:
        for dest, value in config.values.items():
            if dest not in explicit:
                setattr(args, dest, value)
    return Loaded(args, tuple(argv), explicit, config)


def add_config_flag(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument("--config", metavar="FILE", default=None,
                        help=f"settings from a TOML file (e.g. {example}): keys are the long flags with _ for -, "
                             "`--no-X` is `X = false`; flags given here win over the file; SIGHUP re-reads it")
