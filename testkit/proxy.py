"""A TCP proxy on 127.0.0.1 that a test can cut and heal: the network faults between an
agent and the master, without touching the host's firewall.

- `cut("reset")`: every open connection is reset (RST) and new ones are closed at once,
  as when a peer's host is up but refuses (a crashed process, a rebooted box).
- `cut("blackhole")`: nothing is forwarded any more in either direction, open connections
  are held (no FIN, no RST) and new ones are accepted and held: a network partition as
  the endpoints see it, noticed only through keepalives and timeouts.
- `heal()`: forwarding resumes; held connections are connected through, as TCP does when
  a partition ends before either end gave up.

One accept thread and one thread per connection, at most `max_links` connections.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from typing import Literal

Mode = Literal["open", "reset", "blackhole"]
_POLL_S = 0.05
_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Closes with SO_LINGER 0: the peer gets an RST, not a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Link:
    """One client connection and its upstream, pumped by one thread."""

    def __init__(self, proxy: TcpProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="proxy-link", daemon=True)

    def close(self, reset: bool = False) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            if sock is not None:
                _reset(sock) if reset else sock.close()

    def _connect(self) -> bool:
        try:
            self.upstream = socket.create_connection(self.proxy.target, timeout=2.0)
            self.upstream.settimeout(None)
            return True
        except OSError:
            return False

    def _run(self) -> None:
        try:
            while not self.closed.is_set():
                if self.proxy.mode == "blackhole":
                    self.closed.wait(_POLL_S)
                    continue
                if self.upstream is None and not self._connect():
                    break
                if not self._pump_once():
                    break
        except (OSError, ValueError):
            pass
        finally:
            self.close()
            self.proxy._forget(self)

    def _pump_once(self) -> bool:
        assert self.upstream is not None
        ready, _, _ = select.select([self.client, self.upstream], [], [], _POLL_S)
        for sock in ready:
            if self.proxy.mode == "blackhole":   # cut while we waited: forward nothing
                return True
            data = sock.recv(_CHUNK)
            if not data:
                return False
            (self.upstream if sock is self.client else self.client).sendall(data)
        return True


class TcpProxy:
    """Listens on 127.0.0.1:0 and forwards to `target`; see the module docstring."""

    def __init__(self, target: tuple[str, int], max_links: int = 64) -> None:
        self.target = target
        self.max_links = max_links
        self.mode: Mode = "open"
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def links(self) -> int:
        with self._lock:
            return len(self._links)

    def cut(self, mode: Literal["reset", "blackhole"] = "reset") -> None:
        """Starts a fault. "reset" drops every open connection now; "blackhole" holds them."""
        if mode not in ("reset", "blackhole"):
            raise ValueError(f"unknown cut mode {mode!r}")
        self.mode = mode
        if mode == "reset":
            for link in self._snapshot():
                link.close(reset=True)

    def heal(self) -> None:
        self.mode = "open"

    def close(self) -> None:
        """Stops accepting, closes every connection and joins the threads (bounded)."""
        self._stopped.set()
        self._acceptor.join(5)
        self._listener.close()
        links = self._snapshot()
        for link in links:
            link.close()
        for link in links:
            link.thread.join(5)

    def _snapshot(self) -> list[_Link]:
        with self._lock:
            return list(self._links)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            client.setblocking(True)
            if self.mode == "reset" or self.links() >= self.max_links:
                _reset(client)
                continue
            link = _Link(self, client)
            with self._lock:
                self._links.add(link)
            link.thread.start()
