"""The fault proxy itself: forwards, resets, holds (blackhole) and heals. Runs in about a
second against an echo server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

from testkit.proxy import TcpProxy

QUIET_S = 0.4   # how long "nothing arrives" is watched for


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:   # the proxy reset us: that is what the tests do
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[:2]
    stop.set()
    thread.join(2)
    server.close()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[TcpProxy]:
    p = TcpProxy(echo)
    yield p
    p.close()


def _connect(p: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", p.port), timeout=2)


def _roundtrip(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    return sock.recv(4096)


def test_forwards_both_ways(proxy: TcpProxy) -> None:
    with _connect(proxy) as sock:
        assert _roundtrip(sock) == b"ping"


def test_reset_drops_open_connections_and_refuses_new_ones_until_healed(proxy: TcpProxy) -> None:
    sock = _connect(proxy)
    assert _roundtrip(sock) == b"ping"
    proxy.cut("reset")
    with pytest.raises((ConnectionResetError, ConnectionAbortedError, BrokenPipeError, OSError)):
        sock.sendall(b"x")
        if sock.recv(10) == b"":   # a close seen as EOF counts as dropped too
            raise ConnectionResetError("eof")
    sock.close()
    with pytest.raises(OSError):   # refused at connect (a fast RST) or right after it
        with _connect(proxy) as fresh:
            fresh.sendall(b"x")
            if fresh.recv(10) == b"":
                raise ConnectionResetError("eof")
    proxy.heal()
    with _connect(proxy) as healed:
        assert _roundtrip(healed) == b"ping"


def test_blackhole_holds_connections_silently_and_heal_resumes_them(proxy: TcpProxy) -> None:
    old = _connect(proxy)
    assert _roundtrip(old) == b"ping"
    proxy.cut("blackhole")
    new = _connect(proxy)                    # accepted, as a partitioned peer's SYN-ACK would not be...
    for sock in (old, new):                  # ...but nothing comes back: no data, no FIN, no RST
        sock.settimeout(QUIET_S)
        sock.sendall(b"lost?")
        with pytest.raises(socket.timeout):
            sock.recv(10)
    proxy.heal()
    for sock in (old, new):
        sock.settimeout(2)
        assert _roundtrip(sock, b"!").startswith(b"lost?")   # held bytes flow once healed
        sock.close()


def test_close_ends_every_thread(echo: tuple[str, int]) -> None:
    p = TcpProxy(echo)
    socks = [_connect(p) for _ in range(3)]
    for sock in socks:
        assert _roundtrip(sock) == b"ping"
    p.close()
    assert p.links() == 0
    for sock in socks:
        sock.close()
