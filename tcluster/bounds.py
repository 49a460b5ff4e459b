"""Explicit limits on everything a client or an agent can send, and the one way bad
values are quoted back: a short prefix, never megabytes.

The gRPC servers and channels use MAX_MESSAGE_BYTES (in GRPC_OPTIONS); every field below is checked before
anything is written, so an oversized or malformed message changes nothing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

from tcluster.errors import InvalidArgument

if TYPE_CHECKING:
    from tcluster.model import JobSpec

MAX_MESSAGE_BYTES = 4 * 2**20        # any single gRPC message, both directions
# The agent stream's options, on both ends (the master adds its ping floor, the load harness
# its channel pool): keepalive pings find a dead peer behind half-open TCP even when no
# message is due, and every message is bounded both ways.
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC core (1.85 here) waits for a ping's answer grpc.http2.ping_timeout_ms (60 s by
    # default), not keepalive_timeout_ms: a SIGSTOPped or dead host's stream stayed open until
    # the silence limit (tests/faults/test_agent_paused.py). And it sends at most 2 pings
    # until a data frame goes out (a quiet agent sends one report per usage interval): no cap.
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
)
GRPC_OPTIONS: tuple[tuple[str, int], ...] = (
    *KEEPALIVE_OPTIONS,
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
# A server's side of the same: the message bounds, and keepalive pings accepted every 5 s
# (gRPC servers refuse pings more often than every 5 minutes by default and close the
# connection after two: the clients above ping every 10 s).
SERVER_GRPC_OPTIONS: tuple[tuple[str, int], ...] = (*GRPC_OPTIONS, ("grpc.http2.min_ping_interval_without_data_ms", 5_000))
MAX_SPEC_BYTES = 2**20               # a job spec, all strings together
# A job's stored record (its spec as JSON) in either store: below etcd's default
# --max-request-bytes (1.5 MiB) with room for the transaction around it. JSON takes 2 bytes
# for a quote or a backslash and 6 for a control character or (escaped) non-ASCII one, so a
# spec within MAX_SPEC_BYTES may still encode beyond it. SQLite keeps the same bound, so
# both stores take the same jobs.
MAX_RECORD_BYTES = 1_400_000
MAX_NAME_BYTES = 253                 # node, queue, user, image, label keys and values, ids
MAX_ARGS = 4096                      # command words
MAX_ENV = 1024                       # environment variables
MAX_LABELS = 64                      # job labels, node labels
MAX_CONSTRAINTS = 64
MAX_REASON_BYTES = 4096              # a task event's reason; longer ones are cut, not refused
MAX_EVENTS_PER_MESSAGE = 500         # task events in one Register or TaskEvents message
MAX_USAGE_PER_HEARTBEAT = 20_000
QUOTE_CHARS = 40


def quote(value: object) -> str:
    """repr of at most QUOTE_CHARS characters of a bad value, with its full length."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= QUOTE_CHARS:
        return repr(text) if isinstance(value, str) else text
    return f"{text[:QUOTE_CHARS]!r}… ({len(text)} chars)"


def check_name(field: str, value: str, limit: int = MAX_NAME_BYTES) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidArgument(field, f"{quote(value)} is {size} bytes; at most {limit} allowed")
    if "\x00" in value:
        raise InvalidArgument(field, f"{quote(value)} contains a NUL byte")


def check_count(field: str, items: Iterable[object], limit: int) -> None:
    count = sum(1 for _ in items)
    if count > limit:
        raise InvalidArgument(field, f"has {count} entries; at most {limit} allowed")


def spec_size(spec: JobSpec) -> int:
    parts = [*spec.command, spec.name, spec.queue, spec.user, spec.workdir, spec.image, *spec.constraints]
    parts += [k + v for k, v in spec.env] + [k + v for k, v in spec.labels]
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in parts)


def check_spec_bounds(spec: JobSpec) -> None:
    """Sizes only; the meaning of each field is JobSpec.validate's business."""
    check_count("command", spec.command, MAX_ARGS)
    check_count("env", spec.env, MAX_ENV)
    check_count("labels", spec.labels, MAX_LABELS)
    check_count("constraints", spec.constraints, MAX_CONSTRAINTS)
    for field, value in (("queue", spec.queue), ("user", spec.user), ("image", spec.image),
                         ("workdir", spec.workdir)):
        check_name(field, value, 4096 if field == "workdir" else MAX_NAME_BYTES)
    for key, value in spec.labels:
        check_name("labels", key)
        check_name(f"labels.{key[:QUOTE_CHARS]}", value)
    for text in spec.constraints:
        check_name("constraints", text, 1024)
    size = spec_size(spec)
    if size > MAX_SPEC_BYTES:
        raise InvalidArgument("spec", f"is {size} bytes of command, env and labels; at most {MAX_SPEC_BYTES} allowed")
    for key, value in spec.env:
        if "\x00" in value:
            raise InvalidArgument(f"env.{key[:QUOTE_CHARS]}", "value contains a NUL byte")
    check_record_size(spec)


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB"


def record_size_bound(spec: JobSpec) -> int:
    """An upper bound of the spec's JSON size, without encoding it: 6 bytes per string
    byte at most, plus quotes and commas per string and the fixed fields."""
    strings = len(spec.command) + 2 * len(spec.env) + 2 * len(spec.labels) + len(spec.constraints) + 8
    kinds = sum(6 * len(kind.encode("utf-8", "surrogatepass")) + 32 for kind in spec.resources.as_dict())
    return 6 * spec_size(spec) + 8 * strings + kinds + 4096


def check_record_size(spec: JobSpec, limit: int = MAX_RECORD_BYTES) -> None:
    """Refuses a spec whose stored record would exceed `limit`, naming the field that takes most."""
    if record_size_bound(spec) <= limit:
        return                                  # nearly every spec: no need to encode it
    from tcluster.codec import spec_to_dict     # here: codec imports the model, which imports this module
    data = spec_to_dict(spec)
    total = len(json.dumps(data, separators=(",", ":")).encode())
    if total <= limit:
        return
    sizes = {name: len(json.dumps(value, separators=(",", ":")).encode()) for name, value in data.items()}
    field = max(sizes, key=lambda name: sizes[name])
    raise InvalidArgument(field, f"encodes to {_mb(sizes[field])} as stored (the job record to {_mb(total)}: quotes "
                                 "and backslashes take 2 bytes, control and non-ASCII characters up to 6); the store "
                                 f"takes at most {_mb(limit)} per job record")
