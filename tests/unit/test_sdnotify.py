"""sd_notify over a real AF_UNIX datagram socket (a path and an abstract name), the
watchdog's rate and its WATCHDOG_PID check, and tasks that never see NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime.base import TaskSpec
from tcluster.agent.runtime.launch import task_env
from tcluster.domain.resources import Resources
from tcluster.daemonkit.sdnotify import Notifier, socket_address, watchdog_interval_s


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(2)
    yield sock, path
    sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_ready_and_status_reach_a_path_socket(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier(socket_address(path))
    notifier.ready("serving on port 7070")
    assert received(sock) == ["READY=1", "STATUS=serving on port 7070"]
    notifier.status("2 nodes")
    assert received(sock) == ["STATUS=2 nodes"]
    notifier.reloading()
    lines = received(sock)
    assert lines[0] == "RELOADING=1" and lines[1].startswith("MONOTONIC_USEC=") and lines[1][15:].isdigit()
    notifier.stopping()
    assert received(sock) == ["STOPPING=1"]
    notifier.close()


def test_an_abstract_socket_is_written_with_a_leading_at() -> None:
    name = f"tcl-test-notify-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        assert socket_address("@" + name) == b"\0" + name.encode()
        Notifier(socket_address("@" + name)).ready()
        assert received(sock) == ["READY=1"]
    finally:
        sock.close()


def test_from_env_reads_the_socket_and_the_watchdog(monkeypatch: pytest.MonkeyPatch,
                                                    listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier = Notifier.from_env()
    assert notifier.enabled and notifier.watchdog_s == 30.0
    notifier.watchdog()
    assert received(sock) == ["WATCHDOG=1"]
    notifier.watchdog()                 # within a quarter of the interval: not sent again
    sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        sock.recv(4096)
    # The daemon's own environment keeps NOTIFY_SOCKET (k3s#13725).
    assert os.environ["NOTIFY_SOCKET"] == path


def test_the_watchdog_pings_as_often_as_a_quarter_of_its_interval(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier(path, watchdog_s=0.0)     # every call
    for _ in range(3):
        notifier.watchdog()
    assert [received(sock) for _ in range(3)] == [["WATCHDOG=1"]] * 3


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"WATCHDOG_USEC": "0"}, None),
    ({"WATCHDOG_USEC": "abc"}, None),
    ({"WATCHDOG_USEC": "5000000"}, 5.0),
    ({"WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "1"}, None),     # meant for another process
])
def test_watchdog_interval(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval_s(env) == expected


@pytest.mark.parametrize("value, expected", [("", None), ("/run/systemd/notify", "/run/systemd/notify"),
                                             ("@abc", b"\0abc"), ("vsock:2:1", None)])
def test_socket_address(value: str, expected: str | bytes | None) -> None:
    assert socket_address(value) == expected


def test_without_systemd_nothing_is_sent_and_nothing_fails(tmp_path: Path) -> None:
    Notifier.disabled().ready()
    Notifier.disabled().watchdog()
    assert Notifier(str(tmp_path / "gone.sock")).send("READY=1") is False   # no listener: False, no error


def test_tasks_never_get_the_notify_socket_even_from_their_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    spec = TaskSpec(key="t-1", task_id="t", attempt=0, command=("true",), resources=Resources.of({"cpu": 0.1}),
                    stdout_path="/dev/null", stderr_path="/dev/null",
                    env=(("NOTIFY_SOCKET", "/x"), ("WATCHDOG_USEC", "1"), ("A", "b")))
    env = task_env(spec, None)
    assert "NOTIFY_SOCKET" not in env and "WATCHDOG_USEC" not in env and env["A"] == "b"
