"""systemd's notify protocol (sd_notify(3)) in a few lines, without a dependency: one
datagram of `KEY=VALUE` lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or an
abstract name written with a leading '@').

The daemons send READY=1 once serving, STATUS= lines that `systemctl status` shows,
RELOADING=1/READY=1 around a SIGHUP reload, STOPPING=1, and WATCHDOG=1 from their main
loops after a successful iteration, so that a deadlocked loop stops the pings and systemd
(WatchdogSec=) restarts the daemon. NOTIFY_SOCKET stays in the daemon's own environment
(unsetting it broke k3s's watchdog, k3s#13725); only tasks' environments drop it
(agent/runtime/launch.py)."""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)

# What systemd gives a service and nothing else should inherit (tasks, docker containers).
SYSTEMD_ONLY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(value: str) -> str | bytes | None:
    """The address to send to: a path, or bytes for an abstract socket ('@name' -> b'\\0name')."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None                       # e.g. vsock: not a socket this code speaks to


def watchdog_interval_s(env: dict[str, str] | os._Environ[str]) -> float | None:
    """WatchdogSec= of the unit, when the watchdog applies to this very process."""
    usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 1e6


class Notifier:
    """Sends to systemd when started by it (Type=notify); a no-op otherwise."""

    def __init__(self, address: str | bytes | None, watchdog_s: float | None = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s
        self._last_ping = 0.0
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls) -> Notifier:
        return cls(socket_address(os.environ.get("NOTIFY_SOCKET", "")), watchdog_interval_s(os.environ))

    @classmethod
    def disabled(cls) -> Notifier:
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """One datagram; False (logged once at debug) if it could not be sent."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(lines).encode(), self.address)
            return True
        except OSError as error:
            log.debug("sd_notify %s: %s", lines, error)
            return False

    def ready(self, status: str = "") -> None:
        self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd >= 253 match the reload to this message.
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def watchdog(self) -> None:
        """WATCHDOG=1, at most four times per watchdog interval (a loop may turn every 10 ms)."""
        if self.address is None or self.watchdog_s is None:
            return
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_s / 4:
            self._last_ping = now
            self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
