"""The resource vector: `cpu` (cores), `memory` (bytes) and any operator-declared kinds."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.slurmunits import UNLIMITED_MARK, parse_memory
from tcluster.domain.units import format_bytes, format_cpu, parse_bits, parse_bytes, parse_cpu

CPU = "cpu"
MEMORY = "memory"
GPU = "gpu"                   # whole devices; the agent binds a task to that many of its own
# Float slack for fractional cores, so 0.1 + 0.2 fits in 0.3.
_EPSILON = 1e-9
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_AMOUNT = 2.0**60          # of any kind (an EiB of memory, 10^18 cores): beyond it int64 wire fields overflow


@dataclass(frozen=True)
class Resources:
    cpu: float = 0.0
    memory: int = 0
    other: tuple[tuple[str, float], ...] = ()  # sorted (kind, amount) pairs

    @classmethod
    def of(cls, amounts: Mapping[str, float]) -> Resources:
        others = tuple(sorted((k, float(v)) for k, v in amounts.items() if k not in (CPU, MEMORY) and v))
        return cls(float(amounts.get(CPU, 0.0)), int(amounts.get(MEMORY, 0)), others)

    def as_dict(self) -> dict[str, float]:
        return {CPU: self.cpu, MEMORY: float(self.memory), **dict(self.other)}

    def get(self, kind: str) -> float:
        return self.as_dict().get(kind, 0.0)

    def __add__(self, rhs: Resources) -> Resources:
        return self._combine(rhs, 1.0)

    def __sub__(self, rhs: Resources) -> Resources:
        return self._combine(rhs, -1.0)

    def _combine(self, rhs: Resources, sign: float) -> Resources:
        total = self.as_dict()
        for kind, amount in rhs.as_dict().items():
            total[kind] = total.get(kind, 0.0) + sign * amount
        return Resources.of(total)

    def times(self, factor: float) -> Resources:
        return Resources.of({k: v * factor for k, v in self.as_dict().items()})

    def shortfall(self, free: Resources) -> list[str]:
        """Kinds of which `free` holds less than this request."""
        have = free.as_dict()
        return [k for k, v in self.as_dict().items() if v > have.get(k, 0.0) + _EPSILON]

    def fits_in(self, free: Resources) -> bool:
        return not self.shortfall(free)

    def clamp_nonnegative(self) -> Resources:
        return Resources.of({k: max(0.0, v) for k, v in self.as_dict().items()})

    def dominant_share(self, total: Resources) -> float:
        """max over kinds of self/total (kinds the cluster lacks are ignored)."""
        cap = total.as_dict()
        shares = [v / cap[k] for k, v in self.as_dict().items() if cap.get(k, 0.0) > 0]
        return max(shares, default=0.0)

    def describe(self) -> str:
        parts = [f"cpu={format_cpu(self.cpu)}", f"memory={format_bytes(self.memory)}"]
        parts += [f"{k}={v:g}" for k, v in self.other]
        return " ".join(parts)

    def validate_request(self, field: str = "resources") -> None:
        for kind, amount in self.as_dict().items():
            if not math.isfinite(amount) or amount < 0 or amount > MAX_AMOUNT:
                raise InvalidArgument(f"{field}.{kind[:40]}", f"{amount!r} must be a finite amount from 0 to {MAX_AMOUNT:g}")
        if self.cpu == 0 and self.memory == 0 and not self.other:
            raise InvalidArgument(field, "request is empty; ask for some cpu and/or memory (e.g. --cpu 0.5 --mem 256Mi)")


_ALIASES = {"cpu": CPU, "cpus": CPU, "cpu_num": CPU, "memory": MEMORY, "mem": MEMORY, "gpus": GPU}


def parse_amount(kind: str, value: str | float, field: str, request: bool = False) -> float:
    """`request`: a job's request, whose memory reads as `--mem` does (a bare number is MiB;
    `unlimited` is UNLIMITED_MARK until cli/spec.py merges the layers)."""
    if kind == CPU:
        return parse_cpu(value, field)
    if kind == MEMORY:
        return float((parse_memory(value, field) or UNLIMITED_MARK) if request else parse_bytes(value, field))
    if kind == "net":
        return parse_bits(value, field)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        try:
            number = float(str(value))
        except ValueError:
            raise InvalidArgument(field, f"cannot parse {str(value)[:40]!r} as a number") from None
    if not math.isfinite(number) or number < 0:
        raise InvalidArgument(field, f"{value!r} must be a finite amount >= 0")
    if kind == GPU and not number.is_integer():
        raise InvalidArgument(field, f"{value!r} must be a whole number of GPUs (a task gets whole devices)")
    return number


def resources_from_mapping(amounts: Mapping[str, object], field: str = "resources", request: bool = False) -> Resources:
    """{'cpu': '0.5', 'memory': '256Mi', 'net': '10Mbit'} -> Resources."""
    parsed: dict[str, float] = {}
    for raw_kind, value in amounts.items():
        kind = _ALIASES.get(str(raw_kind).strip().lower(), str(raw_kind).strip().lower())
        if not _KIND.match(kind):
            raise InvalidArgument(field, f"resource name {str(raw_kind)[:40]!r} is not allowed; use lowercase letters, digits, _")
        parsed[kind] = parse_amount(kind, value, f"{field}.{kind}", request)  # type: ignore[arg-type]
    return Resources.of(parsed)


def parse_resource_string(text: str, field: str = "resources", request: bool = False) -> Resources:
    """The TCluster paper's form: `cpu_num=0.5; memory=0.5GB` (`,` also separates)."""
    amounts: dict[str, str] = {}
    for item in re.split(r"[;,]", text):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InvalidArgument(field, f"expected key=value, got {item.strip()[:40]!r} (e.g. 'cpu_num=0.5; memory=0.5GB')")
        amounts[key.strip()] = value.strip()
    if not amounts:
        raise InvalidArgument(field, "empty resource string (e.g. 'cpu_num=0.5; memory=0.5GB')")
    return resources_from_mapping(amounts, field, request)
