"""`tcl exec JOB[.TASK] [-i] [-t] -- CMD`: a command inside a running task, its stdio relayed
through the master on one Exec stream; `tcl run` (cli/runcmd.py) attaches the same way.

stdin goes up only with -i (as kubectl/docker exec). Under -t the local terminal is put in
raw mode (restored on every way out), every key goes to the remote terminal (Ctrl-C
included, as ssh and `srun --pty` do) and SIGWINCH sends the new size. tcl's exit code is
the command's (128+N for signal N); 1 when the master refused or the exec broke off."""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tcluster.v1 import jobs_pb2

CHUNK = 64 * 1024
STDIN_AHEAD = 16                 # stdin messages read ahead of the stream (memory stays bounded)
EXIT_FAILURE = 1


def parse_target(text: str) -> tuple[str, int]:
    job, dot, index = text.partition(".")
    if not job:
        raise ValueError("JOB[.TASK]: the job id is empty")
    if dot and not index.isdigit():
        raise ValueError(f"JOB[.TASK]: task {index!r} is not a task index (0, 1, ...)")
    return job, int(index) if dot else 0


def command_of(words: list[str]) -> list[str]:
    return words[1:] if words[:1] == ["--"] else words


def exec_cmd(args: argparse.Namespace, client: Any) -> int:
    try:
        job_id, index = parse_target(args.target)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = command_of(args.command)
    if not command:
        print("error: command: give the command after --, e.g. tcl exec JOB -- ps aux", file=sys.stderr)
        return 2
    return attach(client, job_id, index, command, args.stdin, args.tty)


def _window_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return size.lines, size.columns
    except OSError:
        return 0, 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Requests:
    """The stream's requests: the open, then stdin (read by a thread, a few ahead) and resizes.
    Each iteration is one attempt of the call (HA: a standby's refusal, then the leader)
    and starts with the open again; an older attempt's reader stops taking requests."""

    def __init__(self, opened: jobs_pb2.ExecOpen) -> None:
        self._open = jobs_pb2.ExecRequest(open=opened)
        self._items: deque[jobs_pb2.ExecRequest | None] = deque()
        self._cond = threading.Condition()
        self._attempt = 0
        self._ahead = threading.Semaphore(STDIN_AHEAD)

    def put(self, request: jobs_pb2.ExecRequest | None) -> None:
        with self._cond:
            self._items.append(request)
            self._cond.notify_all()

    def close(self) -> None:
        self.put(None)

    def read_stdin(self, fd: int) -> None:
        def loop() -> None:
            while True:
                self._ahead.acquire()
                try:
                    data = os.read(fd, CHUNK)
                except OSError:
                    data = b""
                if not data:
                    self.put(jobs_pb2.ExecRequest(stdin_eof=True))
                    return
                self.put(jobs_pb2.ExecRequest(stdin=data))
        threading.Thread(target=loop, name="exec-stdin", daemon=True).start()

    def __iter__(self) -> Iterator[jobs_pb2.ExecRequest]:
        with self._cond:
            self._attempt += 1
            mine = self._attempt
            self._cond.notify_all()          # an older attempt's reader wakes and stops
        yield self._open
        while True:
            with self._cond:
                while mine == self._attempt and not self._items:
                    self._cond.wait()
                if mine != self._attempt or self._items[0] is None:
                    return
                item = self._items.popleft()
            assert item is not None
            if item.WhichOneof("kind") == "stdin":
                self._ahead.release()
            yield item


class RawTerminal:
    """The local terminal in raw mode for as long as the exec lasts; SIGWINCH -> a resize."""

    def __init__(self, requests: Requests) -> None:
        self.requests = requests
        self._saved: Any = None
        self._old_handler: Any = None

    def __enter__(self) -> RawTerminal:
        import termios
        import tty
        if os.isatty(0):
            self._saved = termios.tcgetattr(0)
            tty.setraw(0)
        self._old_handler = signal.signal(signal.SIGWINCH, self._resized)
        return self

    def _resized(self, signum: int, frame: object) -> None:
        rows, cols = _window_size()
        if rows and cols:
            self.requests.put(jobs_pb2.ExecRequest(resize=jobs_pb2.ExecWindowSize(rows=rows, cols=cols)))

    def __exit__(self, *exc: object) -> None:
        import termios
        signal.signal(signal.SIGWINCH, self._old_handler or signal.SIG_DFL)
        if self._saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, self._saved)


def exit_code_of(ended: jobs_pb2.ExecExit) -> int:
    if ended.has_exit_code:
        return ended.exit_code
    if ended.signal:
        return 128 + ended.signal
    print(f"tcl exec: {ended.error or 'the command ended without an exit status'}", file=sys.stderr)
    return EXIT_FAILURE


def attach(client: Any, job_id: str, index: int, command: list[str], interactive: bool, tty: bool,
           on_started: Callable[[str], None] = lambda node: None) -> int:
    rows, cols = _window_size() if tty else (0, 0)
    opened = jobs_pb2.ExecOpen(job_id=job_id, task_index=index, command=command, tty=tty, rows=rows, cols=cols,
                               term=os.environ.get("TERM", "") if tty else "")
    requests = Requests(opened)
    if interactive:
        requests.read_stdin(sys.stdin.fileno())
    else:
        requests.put(jobs_pb2.ExecRequest(stdin_eof=True))
    call, first = client.exec_stream(requests)
    code = EXIT_FAILURE
    try:
        with RawTerminal(requests) if tty else _NoTerminal():
            for reply in itertools.chain([first] if first is not None else [], call):
                kind = reply.WhichOneof("kind")
                if kind == "stdout":
                    _write_all(1, reply.stdout)
                elif kind == "stderr":
                    _write_all(2, reply.stderr)
                elif kind == "started":
                    on_started(reply.started)
                elif kind == "exit":
                    code = -1
                    ended = reply.exit
        if code == -1:
            return exit_code_of(ended)
        print("tcl exec: the stream ended without the command's exit status", file=sys.stderr)
        return EXIT_FAILURE
    except BaseException:
        call.cancel()                 # the master cancels the exec: the node kills the command
        raise
    finally:
        requests.close()


class _NoTerminal:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

