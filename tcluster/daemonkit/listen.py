"""Binding a daemon's port, with one clear line when it cannot be had.

grpcio reports a failed bind as `RuntimeError: Failed to bind to address ...; set
GRPC_VERBOSITY=debug` (older releases return port 0), which reached the operator as a
40-line traceback. Here it becomes a ListenError (an OSError, so the daemons' mains print
it as `tcl-master: ...` and exit 1) saying why, found by trying the same bind with a plain
socket: the port is taken, the host is not this machine's, or the port needs privilege."""

from __future__ import annotations

import errno
import socket
from typing import Callable


class ListenError(OSError):
    """A port the daemon could not listen on; the message is the whole explanation."""


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT (or [V6]:PORT) -> (host, port); ValueError when there is no port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def bind_reason(address: str) -> str:
    """Why a bind to `address` fails, by trying it: '' when a plain socket can bind it."""
    try:
        host, port = split_address(address)
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (ValueError, OSError) as error:
        return f"cannot resolve the host ({error})"
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the servers do: TIME_WAIT is no reason
        try:
            probe.bind(where)
        except OSError as error:
            return _explained(error, host, port)
    return ""


def _explained(error: OSError, host: str, port: int) -> str:
    if error.errno == errno.EADDRINUSE:
        return f"port {port} is already in use (see who holds it: ss -ltnp 'sport = :{port}')"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this host"
    if error.errno == errno.EACCES:
        return f"port {port} is below 1024: it needs root or CAP_NET_BIND_SERVICE"
    return error.strerror or str(error)


def listen_failure(address: str, flag: str) -> ListenError:
    reason = bind_reason(address) or "the address is not available"
    return ListenError(f"cannot listen on {address} ({flag}): {reason}; choose another with {flag}")


def bind_port(add_port: Callable[[str], int], address: str, flag: str) -> int:
    """`add_port(address)` (a grpc server's add_insecure_port, or a lambda around
    add_secure_port), its port; ListenError with the reason when the bind failed.

    The port is tried first with a plain socket: grpc servers set SO_REUSEPORT, so a second
    tcl-master on a running one's port would otherwise bind too and take half its calls."""
    reason = bind_reason(address)
    if reason:
        raise ListenError(f"cannot listen on {address} ({flag}): {reason}; choose another with {flag}")
    try:
        port = add_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise listen_failure(address, flag)
    return port
