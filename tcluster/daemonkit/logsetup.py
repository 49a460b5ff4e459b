"""The daemons' log lines (tcl-master, tcl-agent, tcl-gm): one setup shared by all three.

Under systemd, stderr is the journal. journald stamps every entry itself and reads a
syslog priority from a leading `<N>` (sd-daemon(3)), so there each line is
`<3>tcluster.master.x: message`: no second timestamp, and `journalctl -p err` finds the
errors. systemd says a process is writing to the journal when JOURNAL_STREAM holds the
device and inode of its stderr (systemd.exec(5)); a pipe or a terminal gets the usual
`TIME LEVEL logger: message`. A traceback's lines carry the record's priority too, so a
multi-line error stays one priority rather than falling back to info line by line.

`--log-format json` writes one JSON object a line (ts, level, logger, msg, exc when there
is one) for a log shipper; under journald it keeps the `<N>` prefix, which journald strips."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Mapping, TextIO

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
# syslog(3) priorities of Python's levels: err, warning, info, debug (crit above ERROR)
SYSLOG_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}
OURS = "_tcluster_daemon_handler"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_level_arg(text: str) -> str:
    """--log-level and the file's log_level: a level name in any case, or a clear error
    listing the allowed ones (not logging's traceback on an unknown level)."""
    level = text.strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r}; choose one of: {', '.join(LOG_LEVELS)}")
    return level


def add_log_flags(parser: argparse.ArgumentParser, level_default: str | None = "INFO",
                  format_default: str | None = "text") -> None:
    """--log-level and --log-format, the same on every daemon."""
    parser.add_argument("--log-level", type=log_level_arg, default=level_default, metavar="LEVEL",
                        help="DEBUG, INFO, WARNING or ERROR; SIGHUP applies a new one (default INFO)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=format_default,
                        help="text lines, or one JSON object a line for a log shipper (default text)")


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a Python level; levels between the named ones round down in
    severity (a custom level 25 is info, 35 warning)."""
    for level in sorted(SYSLOG_PRIORITY, reverse=True):
        if levelno >= level:
            return SYSLOG_PRIORITY[level]
    return SYSLOG_PRIORITY[logging.DEBUG]


def under_journald(env: Mapping[str, str], stream: TextIO) -> bool:
    """True when `stream` is the journal's stream socket: JOURNAL_STREAM=DEV:INODE matches it
    (a child that inherited the variable but writes to a pipe or a file does not match)."""
    device, sep, inode = env.get("JOURNAL_STREAM", "").partition(":")
    if not sep:
        return False
    try:
        stat = os.fstat(stream.fileno())
        return (stat.st_dev, stat.st_ino) == (int(device), int(inode))
    except (OSError, ValueError, AttributeError):
        return False


class JournalFormatter(logging.Formatter):
    """`<N>logger: message`, every line of it (a traceback's too) with the record's priority."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


class JsonFormatter(logging.Formatter):
    """One JSON object a line; `journal` adds journald's priority prefix in front of it."""

    def __init__(self, journal: bool = False) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        line = json.dumps(entry, ensure_ascii=False, default=str)
        return f"<{syslog_priority(record.levelno)}>{line}" if self.journal else line


def make_formatter(log_format: str, journal: bool) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(journal)
    return JournalFormatter() if journal else logging.Formatter(TEXT_FORMAT)


def setup_logging(level: str = "INFO", log_format: str = "text", env: Mapping[str, str] | None = None,
                  stream: TextIO | None = None) -> logging.Handler:
    """The root logger's handler on stderr (replacing the one an earlier call installed, so
    a second call gets one line per record, not two; other handlers, such as pytest's, stay)."""
    stream = sys.stderr if stream is None else stream
    journal = under_journald(os.environ if env is None else env, stream)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(make_formatter(log_format, journal))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, OURS, False)]:
        root.removeHandler(old)
    setattr(handler, OURS, True)
    root.addHandler(handler)
    root.setLevel(log_level_arg(level))
    return handler
