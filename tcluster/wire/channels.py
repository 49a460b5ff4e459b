"""gRPC channel and server options every daemon and the CLI share: each message bounded both
ways (MAX_MESSAGE_BYTES), and keepalive pings that find a dead peer behind half-open TCP."""

from __future__ import annotations

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
