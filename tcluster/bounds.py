"""Explicit limits on everything a client or an agent can send, and the one way bad
values are quoted back: a short prefix, never megabytes.

The gRPC servers and channels use MAX_MESSAGE_BYTES (in GRPC_OPTIONS); every field below is checked before
anything is written, so an oversized or malformed message changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from tcluster.errors import InvalidArgument

if TYPE_CHECKING:
    from tcluster.model import JobSpec

MAX_MESSAGE_BYTES = 4 * 2**20        # any single gRPC message, both directions
# The agent stream's options, on both ends (the master adds its ping floor, the load harness
# its channel pool): keepalive pings find a dead peer behind half-open TCP even when no
# message is due, and every message is bounded both ways.
GRPC_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)
MAX_SPEC_BYTES = 2**20               # a job spec, all strings together
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
