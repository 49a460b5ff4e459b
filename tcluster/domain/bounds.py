"""Explicit limits on everything a client or an agent can send, and the one way bad
values are quoted back: a short prefix, never megabytes.

Every field below is checked before anything is written, so an oversized or malformed message
changes nothing; a whole message is bounded by the channels' options (tcluster/wire/channels.py)."""

from __future__ import annotations

from typing import Iterable

from tcluster.domain.errors import InvalidArgument

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
