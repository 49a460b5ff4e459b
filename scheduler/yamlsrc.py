"""YAML that remembers where each value was written, for errors that name the line.

`load_located` composes the document (no Python objects are built from tags), refuses
duplicate keys and alias cycles (PyYAML would silently keep the last key, or build a
recursive structure), and returns plain values plus a path -> line table. Paths are
tuples of keys and list indices; `format_path(("jobs", 3, "resources", "cpu"))` is
`jobs[3].resources.cpu`, the form every config error uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any, Mapping

import yaml
from yaml.constructor import SafeConstructor

from tcluster.domain.errors import InvalidArgument

Path = tuple[object, ...]


class YamlConfigError(InvalidArgument):
    """Bad configuration text: `SOURCE:LINE: PATH: what is wrong`."""

    def __init__(self, source: str, line: int, path: Path, message: str) -> None:
        self.source, self.line, self.path = source, line, path
        where = f"{source}:{line}" if line else source
        what = format_path(path)
        super().__init__(where, f"{what}: {message}" if what else message)


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@dataclass(frozen=True)
class Located:
    value: Any
    lines: Mapping[Path, int]
    source: str

    def line(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 0)

    def error(self, path: Path, message: str) -> YamlConfigError:
        return YamlConfigError(self.source, self.line(path), path, message)


def read_config_file(path: FsPath | str, what: str) -> str:
    """A config file's text; one that cannot be read is a YamlConfigError `cannot read WHAT: why`."""
    try:
        return FsPath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlConfigError(str(path), 0, (), f"cannot read {what}: {getattr(exc, 'strerror', None) or exc}") from None


def load_located(text: str, source: str) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise YamlConfigError(source, line, (), f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    lines: dict[Path, int] = {}
    value = None if node is None else _Converter(source, lines).convert(node, (), frozenset())
    return Located(value, lines, source)


class _Converter:
    def __init__(self, source: str, lines: dict[Path, int]) -> None:
        self.source = source
        self.lines = lines
        self.scalars = SafeConstructor()

    def convert(self, node: yaml.Node, path: Path, open_nodes: frozenset[int]) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in open_nodes:  # an alias pointing at one of its own ancestors
            raise YamlConfigError(self.source, self.lines[path], path, "is a cycle (a YAML alias that contains itself)")
        if isinstance(node, yaml.ScalarNode):
            return self.scalars.construct_object(node)
        inner = open_nodes | {id(node)}
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i), inner) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.MappingNode)   # the third and last kind yaml.compose makes
        return self._mapping(node, path, inner)

    def _mapping(self, node: yaml.MappingNode, path: Path, inner: frozenset[int]) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlConfigError(self.source, key_node.start_mark.line + 1, path, "keys must be plain names")
            key = self.scalars.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise YamlConfigError(self.source, line, (*path, key), f"duplicate name (first given at line {first_line[key]})")
            first_line[key] = line
            self.lines[(*path, key)] = line
            result[key] = self.convert(value_node, (*path, key), inner)
        return result
