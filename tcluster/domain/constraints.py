"""Placement constraints on node labels.

    rack=r1        the label equals the value (`==` works too)
    disk!=hdd      the label differs, or the node has no such label
    arch in (x86_64,arm64)      arch notin (ppc64le)
    has gpu        the node has the label, whatever its value (`!has gpu`: it has not)

A job's constraints must all hold. This module parses them and says what they mean
for one node; tcluster.scheduler.matching evaluates them over all nodes at once. It also
parses the labels themselves (`rack=r1,disk=ssd`), which the agent and `tcl-master node`
both take on their command lines."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from tcluster.domain.errors import InvalidArgument

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")
_VALUE = re.compile(r"[A-Za-z0-9_.-]+")
_SPACE = re.compile(r"\s*")
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Constraint:
    op: str                      # eq, ne, in, notin, has, nothas
    key: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.op in ("has", "nothas"):
            return f"{'!' if self.op == 'nothas' else ''}has {self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        return f"{self.key}{'=' if self.op == 'eq' else '!='}{self.values[0]}"

    def holds(self, labels: Mapping[str, str]) -> bool:
        """The plain reference the bit-vector matching must agree with."""
        value = labels.get(self.key)
        return {
            "eq": value == self.values[0] if self.values else False,
            "ne": value != self.values[0] if self.values else True,
            "in": value in self.values,
            "notin": value not in self.values,
            "has": value is not None,
            "nothas": value is None,
        }[self.op]


class _Cursor:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def take(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip_space()
        match = pattern.match(self.text, self.pos)
        if not match:
            self.fail(f"expected {what}")
        self.pos = match.end()  # type: ignore[union-attr]
        return match.group()  # type: ignore[union-attr]

    def accept(self, literal: str) -> bool:
        self.skip_space()
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        return False

    def fail(self, message: str) -> None:
        pointer = f"{self.text}\n{' ' * self.pos}^"
        raise InvalidArgument("constraint", f"{message} at position {self.pos + 1} of {self.text[:200]!r}\n{pointer[:200]}")


def parse_constraint(text: str) -> Constraint:
    cursor = _Cursor(text)
    cursor.skip_space()
    if re.match(r"(!|not\s+)?has\s", text[cursor.pos:]):
        negated = cursor.accept("!") or cursor.accept("not")
        cursor.accept("has")
        constraint = Constraint("nothas" if negated else "has", cursor.take(_KEY, "a label key"))
    else:
        key = cursor.take(_KEY, "a label key")
        constraint = _parse_operator(cursor, key)
    cursor.skip_space()
    if cursor.pos != len(text):
        cursor.fail("unexpected text")
    return constraint


def _parse_operator(cursor: _Cursor, key: str) -> Constraint:
    if cursor.accept("!="):
        return Constraint("ne", key, (cursor.take(_VALUE, "a value"),))
    if cursor.accept("==") or cursor.accept("="):
        return Constraint("eq", key, (cursor.take(_VALUE, "a value"),))
    for word, op in (("notin", "notin"), ("in", "in")):
        if re.match(rf"\s*{word}\b", cursor.text[cursor.pos:]):
            cursor.accept(word)
            return Constraint(op, key, _parse_set(cursor))
    cursor.fail("expected one of = == != in notin")
    raise AssertionError("unreachable")


def _parse_set(cursor: _Cursor) -> tuple[str, ...]:
    if not cursor.accept("("):
        cursor.fail("expected '('")
    values = [cursor.take(_VALUE, "a value")]
    while cursor.accept(","):
        values.append(cursor.take(_VALUE, "a value"))
    if not cursor.accept(")"):
        cursor.fail("expected ',' or ')'")
    return tuple(values)


def parse_constraints(texts: Iterable[str]) -> tuple[Constraint, ...]:
    return _parse_all(tuple(texts))


@functools.lru_cache(maxsize=4096)
def _parse_all(texts: tuple[str, ...]) -> tuple[Constraint, ...]:
    """Scheduling rounds re-read every pending job's constraints: parse each set once."""
    return tuple(parse_constraint(t) for t in texts)


def parse_labels(text: str) -> dict[str, str]:
    """`rack=r1,disk=ssd` -> {'rack': 'r1', 'disk': 'ssd'}; refuses illegal characters."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"label {item!r} is not key=value")
        if not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} is not allowed; use A-Z a-z 0-9 and _ . / - inside, up to 63 chars")
        if not _LABEL_VALUE.match(value):
            raise ValueError(f"label value {value!r} (key {key!r}) is not allowed; use A-Z a-z 0-9 _ . -, up to 63 chars")
        labels[key] = value
    return labels
