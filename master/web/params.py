"""The dashboard API's numeric parameters: each parsed by one bounded parser that answers
400 naming the parameter and its allowed range, for anything else: not a number, NaN,
infinity, `1e400`, a fraction where a whole number is meant, or out of range. (A bare
`int(float(text))` turned `tail=1e400` into an OverflowError and an HTTP 500.)"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from tcluster.domain.errors import InvalidArgument

MAX_TEXT = 40          # longer is never a number we take; also bounds what an error echoes


@dataclass(frozen=True)
class Allowed:
    low: float
    high: float
    whole: bool
    unit: str

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} of {self.unit} from {self._text(self.low)} to {self._text(self.high)}"

    def _text(self, value: float) -> str:
        return str(int(value)) if self.whole else f"{value:g}"


TIMES = Allowed(0, 1e11, False, "seconds since the epoch")        # since, until
LIMITS = Allowed(0, 1000, True, "jobs")                            # /jobs?limit (0: none)
TAILS = Allowed(0, 2**40, True, "bytes (0: the whole log)")        # logs?tail
INDEXES = Allowed(0, 2**31 - 1, True, "task index")                # a task's index


def parse_number(name: str, text: str, allowed: Allowed) -> float:
    """The value of `text`, or InvalidArgument naming `name` and what is allowed."""
    def refuse() -> InvalidArgument:
        return InvalidArgument(name, f"{text[:MAX_TEXT]!r} is not {allowed.describe()}")
    if len(text) > MAX_TEXT:
        raise refuse()
    try:
        value = float(text)
    except ValueError:
        raise refuse() from None
    if not math.isfinite(value) or not allowed.low <= value <= allowed.high or \
            (allowed.whole and not value.is_integer()):
        raise refuse()
    return value


def number(query: Mapping[str, str], name: str, default: float, allowed: Allowed) -> float:
    """A query parameter; absent or empty: the default."""
    text = query.get(name, "")
    return parse_number(name, text, allowed) if text else default


def indexes(query: Mapping[str, str], name: str) -> list[int]:
    """A comma-separated list of task indexes (`tasks=0,3`); empty parts are skipped."""
    return [int(parse_number(name, part, INDEXES)) for part in query.get(name, "").split(",") if part]
