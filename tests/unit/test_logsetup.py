"""The daemons' log lines (tcluster/daemonkit/logsetup.py): journald priorities and one
timestamp under systemd, JSON lines on request, a clear error for a bad level; and the
busy-port explanation (tcluster/daemonkit/listen.py)."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import socket
import tempfile

import pytest

from tcluster.daemonkit import logsetup
from tcluster.daemonkit.listen import ListenError, bind_port, bind_reason
from tcluster.daemonkit.logsetup import (JournalFormatter, JsonFormatter, log_level_arg, setup_logging,
                                         syslog_priority, under_journald)


def _record(level: int, msg: str = "hello %s", args: tuple[object, ...] = ("world",),
            exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys
            info = sys.exc_info()
    return logging.LogRecord("tcluster.x", level, __file__, 1, msg, args, info)


@pytest.mark.parametrize("level, priority", [
    (logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6), (logging.DEBUG, 7),
    (25, 6), (35, 4), (45, 3), (5, 7), (60, 2)])
def test_syslog_priority_of_each_level(level: int, priority: int) -> None:
    assert syslog_priority(level) == priority


def test_journal_lines_carry_the_priority_and_no_timestamp() -> None:
    line = JournalFormatter().format(_record(logging.ERROR))
    assert line == "<3>tcluster.x: hello world"


def test_every_line_of_a_traceback_keeps_the_records_priority() -> None:
    text = JournalFormatter().format(_record(logging.ERROR, exc=True))
    lines = text.split("\n")
    assert len(lines) > 2 and all(line.startswith("<3>") for line in lines)
    assert "ValueError: boom" in lines[-1]


def test_json_lines_parse_and_name_level_logger_message() -> None:
    entry = json.loads(JsonFormatter().format(_record(logging.WARNING)))
    assert (entry["level"], entry["logger"], entry["msg"]) == ("WARNING", "tcluster.x", "hello world")
    assert entry["ts"].endswith("+00:00") and "exc" not in entry
    with_exc = json.loads(JsonFormatter().format(_record(logging.ERROR, exc=True)))
    assert "ValueError: boom" in with_exc["exc"]


def test_json_under_journald_keeps_the_priority_prefix() -> None:
    line = JsonFormatter(journal=True).format(_record(logging.DEBUG))
    assert line.startswith("<7>{") and json.loads(line[3:])["level"] == "DEBUG"


def test_journald_is_recognised_by_the_streams_device_and_inode() -> None:
    with tempfile.TemporaryFile("w") as stream, tempfile.TemporaryFile("w") as other:
        st = os.fstat(stream.fileno())
        assert under_journald({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, stream)
        assert not under_journald({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, other)   # inherited, redirected
        assert not under_journald({}, stream)
        assert not under_journald({"JOURNAL_STREAM": "garbage"}, stream)
    assert not under_journald({"JOURNAL_STREAM": "1:2"}, io.StringIO())     # no file descriptor


def test_setup_writes_one_timestamp_outside_and_none_under_journald() -> None:
    root = logging.getLogger()
    level = root.level
    try:
        with tempfile.TemporaryFile("w+") as stream:
            st = os.fstat(stream.fileno())
            setup_logging("info", env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, stream=stream)  # type: ignore[arg-type]
            logging.getLogger("tcluster.t").warning("careful")
            setup_logging("INFO", env={}, stream=stream)       # replaces the handler: one line per record
            logging.getLogger("tcluster.t").warning("again")
            stream.seek(0)
            lines = stream.read().splitlines()
        assert lines[0] == "<4>tcluster.t: careful"
        assert len(lines) == 2 and lines[1].endswith(" WARNING tcluster.t: again")
        assert lines[1][:4].isdigit()                       # the one timestamp leads the line
    finally:
        for handler in [h for h in root.handlers if getattr(h, logsetup.OURS, False)]:
            root.removeHandler(handler)
        root.setLevel(level)


@pytest.mark.parametrize("text, level", [("debug", "DEBUG"), ("Info", "INFO"), ("warn", "WARNING"),
                                         (" ERROR ", "ERROR")])
def test_log_levels_in_any_case(text: str, level: str) -> None:
    assert log_level_arg(text) == level


@pytest.mark.parametrize("text", ["loud", "", "TRACE", "5"])
def test_a_bad_log_level_is_one_clear_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="unknown log level .*choose one of: DEBUG, INFO, WARNING, ERROR"):
        log_level_arg(text)


def test_a_busy_port_is_explained_and_not_bound() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        assert "already in use" in bind_reason(address)
        called: list[str] = []
        with pytest.raises(ListenError, match=r"cannot listen on .* \(--listen\): port \d+ is already in use"):
            bind_port(lambda a: called.append(a) or 1, address, "--listen")
        assert called == []            # grpc (SO_REUSEPORT) never got to share the port


def test_a_free_port_binds_and_a_failed_grpc_bind_is_a_listen_error() -> None:
    assert bind_reason("127.0.0.1:0") == ""
    assert bind_port(lambda a: 4242, "127.0.0.1:0", "--listen") == 4242

    def refuse(address: str) -> int:
        raise RuntimeError("Failed to bind to address")
    with pytest.raises(ListenError, match=r"\(--agent-listen\)"):
        bind_port(refuse, "127.0.0.1:0", "--agent-listen")


def test_a_foreign_host_and_a_bad_address_are_explained() -> None:
    assert "not an address of this host" in bind_reason("192.0.2.1:7070")     # TEST-NET-1
    assert "cannot resolve" in bind_reason("no-port-here")
