"""`tcl submit -f job.yaml`: read a job file into typed, optional values.

Every error names the file and the field (`job.yaml: resources.memory: ...`) and is an
InvalidArgument, so `tcl` reports it as a usage error (exit 2). Merging with flags and
defaults is spec.py's job; this module only reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import yaml

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import GPU, Resources, parse_resource_string, resources_from_mapping
from tcluster.domain.specfields import FILE_KEYS, SPEC_FIELDS, Kind
from tcluster.domain.slurmunits import parse_time_limit
from tcluster.domain.units import parse_bits, parse_bytes, parse_duration

# A command given as one string is a shell line; it runs as argv [SHELL, "-c", line].
SHELL = ("/bin/sh", "-c")
# The order the "unknown field" error has always listed the keys in; a key of a field
# added since comes after these, with nothing to add here.
_LISTED = ("name", "queue", "tasks", "resources", "command", "env", "user", "workdir", "labels", "constraints",
           "weight", "retries", "log_max", "image", "network", "net_limit")
# Keys that are no spec field of their own: `gpus: N` is the resource `gpu` (resources.gpu).
GPUS_KEY = "gpus"
KNOWN_KEYS = tuple(sorted(FILE_KEYS, key=lambda key: _LISTED.index(key) if key in _LISTED else len(_LISTED))) + (
    GPUS_KEY,)
_BOOL_TAG = "tag:yaml.org,2002:bool"


class _JobFileLoader(yaml.SafeLoader):
    """SafeLoader that keeps yes/no/on/off/true/false as the text written.

    YAML 1.1 would turn `command: [echo, yes]` into ['echo', True] and `DEBUG: on` into
    True; a job file's values are argv and env strings, so nothing there is a boolean.
    """


_JobFileLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class JobFile:
    """What a job file says, by JobSpec field name; only the fields it gives."""
    values: Mapping[str, Any] = dataclass_field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


def load_job_file(path: str) -> JobFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(path, f"cannot read job file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return parse_job_file(text)
    except InvalidArgument as exc:
        raise InvalidArgument(path, str(exc)) from None


def parse_job_file(text: str) -> JobFile:
    try:
        document = yaml.load(text, Loader=_JobFileLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise InvalidArgument("", f"not valid YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
    if document is None:
        return JobFile()
    if not isinstance(document, dict):
        raise InvalidArgument("", "the top level must be a mapping of name, queue, tasks, resources, command, ...")
    unknown = sorted(str(key) for key in document if key not in KNOWN_KEYS)
    if unknown:
        # A typo like `comand:` would otherwise be silently ignored.
        raise InvalidArgument(unknown[0], f"unknown field; allowed: {', '.join(KNOWN_KEYS)}")
    return _job_file_from(document)


def _job_file_from(doc: Mapping[str, Any]) -> JobFile:
    read = ((entry.name, _READERS[entry.kind](doc.get(entry.file_key), entry.file_key))
            for entry in SPEC_FIELDS if entry.file_key)
    values = {name: value for name, value in read if value is not None}
    gpus = _optional_count(doc.get(GPUS_KEY), GPUS_KEY, minimum=0)
    if gpus is not None:
        if values.get("resources", Resources()).get(GPU) not in (0.0, float(gpus)):
            raise InvalidArgument(GPUS_KEY, f"{gpus} contradicts resources.gpu; give one of them")
        values["resources"] = Resources.of({**values.get("resources", Resources()).as_dict(), GPU: gpus})
    return JobFile(MappingProxyType(values))


def _optional_size(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidArgument(key, f"must be a size such as 64Mi, got {value!r}")
    return parse_bytes(str(value), key)


def _optional_weight(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InvalidArgument(key, f"must be a number > 0, got {value!r}")
    return float(value)


def _optional_flag(value: Any, key: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidArgument(key, f"must be true or false, got {value!r}")


def _optional_rate(value: Any, key: str) -> float | None:
    return None if value is None else parse_bits(str(value), key)


def _string_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidArgument(key, "must be a list of strings, e.g. [\"rack=r1\", \"has gpu\"]")
    return tuple(value)


def _optional_string(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, (dict, list, bool)):
        raise InvalidArgument(key, f"must be a string, got {type(value).__name__}")
    return str(value)


def _optional_count(value: Any, key: str, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(key, f"must be a whole number, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidArgument(key, f"must be >= {minimum}, got {value}")
    return value


def _resources(value: Any, key: str) -> Resources | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return resources_from_mapping(value, key, request=True)
    if isinstance(value, str):
        return parse_resource_string(value, key, request=True)
    raise InvalidArgument(
        key, "must be a mapping like {cpu: 0.5, memory: 512Mi} or a string like 'cpu_num=0.5; memory=0.5GB'",
    )


def _command(value: Any, key: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (*SHELL, value)
    if isinstance(value, list) and all(isinstance(part, (str, int, float)) and not isinstance(part, bool) for part in value):
        return tuple(str(part) for part in value)
    raise InvalidArgument(key, "must be a list of arguments or one shell command line (a string)")


def _scalar_text(value: Any, field: str) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise InvalidArgument(field, f"must be a string, got {type(value).__name__}")


def _string_pairs(value: Any, field: str) -> tuple[tuple[str, str], ...]:
    """A mapping {K: V} or a list of 'K=V' strings, as sorted pairs."""
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple(sorted((str(k), _scalar_text(v, f"{field}.{k}")) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(sorted(split_assignment(_scalar_text(item, field), field) for item in value))
    raise InvalidArgument(field, "must be a mapping {KEY: value} or a list of KEY=value strings")


# How a job file writes each kind of value (the field table says which kind a key is):
# each reader takes the value (None when absent) and the key, and returns None when absent.
_READERS: dict[Kind, Callable[[Any, str], Any]] = {
    Kind.TEXT: _optional_string,
    Kind.COUNT: _optional_count,
    Kind.NATURAL: lambda value, key: _optional_count(value, key, minimum=0),
    Kind.WEIGHT: _optional_weight,
    Kind.SIZE: _optional_size,
    Kind.RATE: _optional_rate,
    Kind.DURATION: lambda value, key: None if value is None else parse_duration(value, key),
    Kind.TIME_LIMIT: lambda value, key: None if value is None else parse_time_limit(value, key),
    Kind.FLAG: _optional_flag,
    Kind.PAIRS: _string_pairs,
    Kind.LIST: _string_list,
    Kind.ARGV: _command,
    Kind.RESOURCES: _resources,
}


def split_assignment(text: str, field: str) -> tuple[str, str]:
    """'K=V' -> ('K', 'V'); the value may itself contain '='."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidArgument(field, f"expected KEY=value, got {text!r}")
    return key, value
