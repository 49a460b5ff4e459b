"""`tcl exec` on the node: each ExecStart runs the join helper (agent/execjoin.py) with its
stdio on pipes, or on a pseudo-terminal under `-it`, and relays them over the master's
stream with flow control both ways (agent.proto "exec"):

- output: at most `window` ExecData ahead of the master's credit (ExecFeed.credit, one per
  message its client took), each through the bounded log lane of the send queue, so a
  client that stops reading stops the agent reading the command's output, and the command
  blocks on a full pipe: nothing grows anywhere;
- input: the master sends at most `window` stdin feeds ahead of the stdin credit this side
  grants as each is written to the command; a feed beyond that ends the exec.

A cancel (the client left), the master's stream ending (failover, restart) or the agent
stopping kill the command's whole session (the helper does it; PR_SET_PDEATHSIG covers
an agent that dies)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Awaitable, Callable
from typing import Any

from tcluster.agent.exectarget import ExecRefused, exec_target
from tcluster.agent.sendqueue import Credit
from tcluster.v1 import agent_pb2

log = logging.getLogger(__name__)
CHUNK = 64 * 1024
KILL_AFTER_S = 2.0              # the helper ends the session on SIGTERM at once; SIGKILL after this
DRAIN_AFTER_EXIT_S = 2.0        # output still in the pipes once the command ended
MAX_EXECS = 64                  # per agent at once (the master caps per task and user below this)


class ExecSession:
    """One command running inside a task, its stdio relayed."""

    def __init__(self, start: agent_pb2.ExecStart, target: dict[str, Any],
                 put: Callable[[agent_pb2.AgentMessage], Awaitable[None]],
                 put_control: Callable[[agent_pb2.AgentMessage], None]) -> None:
        self.exec_id = start.exec_id
        self.start = start
        self.target = target
        self._put, self._put_control = put, put_control
        self.credit = Credit(start.window)
        self._stdin: asyncio.Queue[agent_pb2.ExecFeed] = asyncio.Queue()
        self._window = start.window
        self.proc: subprocess.Popen[bytes] | None = None
        self._in_fd = -1              # the command's stdin (pipe or pty master)
        self._master_fd = -1          # pty master (-it)
        self.cancelled = False

    def spawn(self) -> list[int]:
        """The helper, started; the fds its output comes on."""
        spec = {**self.target, "argv": list(self.start.command), "tty": self.start.tty}
        if self.start.tty and self.start.term:
            spec["env"] = {**spec["env"], "TERM": self.start.term}
        rfd, wfd = os.pipe()
        data = json.dumps(spec).encode()
        args = [sys.executable, "-m", "tcluster.agent.execjoin", str(rfd)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(sys.path)}
        try:
            if self.start.tty:
                master, slave = pty.openpty()
                self._resize(master, self.start.rows, self.start.cols)
                self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, pass_fds=(rfd,),
                                             start_new_session=True, env=env, cwd="/")
                os.close(slave)
                self._master_fd = self._in_fd = master
                outs = [master]
            else:
                self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, pass_fds=(rfd,), start_new_session=True,
                                             env=env, cwd="/", bufsize=0)
                assert self.proc.stdin and self.proc.stdout and self.proc.stderr
                self._in_fd = self.proc.stdin.fileno()
                outs = [self.proc.stdout.fileno(), self.proc.stderr.fileno()]
        finally:
            os.close(rfd)
        with os.fdopen(wfd, "wb") as f:
            f.write(data)               # a few KiB: fits the pipe, never blocks
        for fd in outs + [self._in_fd]:
            os.set_blocking(fd, False)
        return outs

    @staticmethod
    def _resize(fd: int, rows: int, cols: int) -> None:
        if rows > 0 and cols > 0:
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", min(rows, 4096), min(cols, 4096), 0, 0))

    def feed(self, feed: agent_pb2.ExecFeed) -> None:
        if feed.cancel:
            self.kill()
            return
        if feed.credit:
            self.credit.grant(feed.credit)
        if feed.rows > 0 and self._master_fd >= 0:
            try:
                self._resize(self._master_fd, feed.rows, feed.cols)
            except OSError:
                pass
        if feed.stdin or feed.stdin_eof:
            if self._stdin.qsize() >= max(self._window, 1):   # the master ignored its window
                log.warning("exec %s: stdin beyond the window; ending it", self.exec_id[:16])
                self.kill()
                return
            self._stdin.put_nowait(feed)

    def kill(self) -> None:
        proc = self.proc
        if proc is None:
            self.cancelled = True           # before the start: run() starts nothing
            return
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)       # the helper kills the command's session

        def hard_kill() -> None:
            if proc.poll() is None:
                proc.kill()
        asyncio.get_running_loop().call_later(KILL_AFTER_S, hard_kill)

    async def run(self) -> None:
        if self.cancelled:
            await self._send(agent_pb2.ExecData(exited=True, error="cancelled before it started"))
            return
        try:
            outs = self.spawn()
        except OSError as error:
            await self._send(agent_pb2.ExecData(exited=True, error=f"cannot start the exec helper: {error}"))
            return
        await self._send(agent_pb2.ExecData(started=True))
        pumps = [asyncio.create_task(self._pump(fd, i == 1)) for i, fd in enumerate(outs)]
        writer = asyncio.create_task(self._write_stdin())
        try:
            rc = await self._wait_exit()
            done, pending = await asyncio.wait(pumps, timeout=DRAIN_AFTER_EXIT_S)
            for p in pending:
                p.cancel()
            writer.cancel()
            code, sig = (rc, 0) if rc >= 0 else (None, -rc)
            data = agent_pb2.ExecData(exited=True, signal=sig)
            if code is not None:
                data.has_exit_code, data.exit_code = True, code
            await self._send(data)
        finally:
            for task in (*pumps, writer):
                task.cancel()
            self.kill()
            self._close_fds()

    async def _wait_exit(self) -> int:
        assert self.proc is not None
        fd = os.pidfd_open(self.proc.pid)
        try:
            await _readable(fd)
        finally:
            os.close(fd)
        return self.proc.wait()

    async def _send(self, data: agent_pb2.ExecData) -> None:
        data.exec_id = self.exec_id
        await self.credit.take()
        await self._put(agent_pb2.AgentMessage(exec_data=data))

    async def _pump(self, fd: int, is_stderr: bool) -> None:
        while True:
            await _readable(fd)
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            except OSError as e:          # EIO: a pty whose every slave end closed
                if e.errno == errno.EIO:
                    return
                raise
            if not chunk:
                return
            await self._send(agent_pb2.ExecData(stderr=chunk) if is_stderr else agent_pb2.ExecData(stdout=chunk))

    async def _write_stdin(self) -> None:
        while True:
            feed = await self._stdin.get()
            view = memoryview(feed.stdin)
            while view:
                try:
                    view = view[os.write(self._in_fd, view):]
                except BlockingIOError:
                    await _writable(self._in_fd)
                except OSError:           # the command closed its stdin: drop the rest
                    view = memoryview(b"")
            if feed.stdin_eof:
                if self._master_fd >= 0:
                    os.write(self._master_fd, b"\x04")     # a terminal's end of input: ^D
                elif self.proc is not None and self.proc.stdin is not None:
                    self.proc.stdin.close()
            self._put_control(agent_pb2.AgentMessage(exec_data=agent_pb2.ExecData(
                exec_id=self.exec_id, stdin_credit=1)))

    def _close_fds(self) -> None:
        if self._master_fd >= 0:
            try:
                os.close(self._master_fd)
            except OSError:
                pass
            self._master_fd = -1
        if self.proc is not None:
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass


async def _readable(fd: int) -> None:
    await _ready(fd, write=False)


async def _writable(fd: int) -> None:
    await _ready(fd, write=True)


async def _ready(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def fire() -> None:
        if not done.done():
            done.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, fire)
    try:
        await done
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


class Execs:
    """The execs a master session is running on this node."""

    def __init__(self, runtime: object, running: Callable[[str, int], bool]) -> None:
        self.runtime = runtime
        self._running = running
        self._sessions: dict[str, tuple[ExecSession, asyncio.Task[None]]] = {}

    def start(self, start: agent_pb2.ExecStart, put: Callable[[agent_pb2.AgentMessage], Awaitable[None]],
              put_control: Callable[[agent_pb2.AgentMessage], None]) -> None:
        def refuse(why: str) -> None:
            put_control(agent_pb2.AgentMessage(exec_data=agent_pb2.ExecData(
                exec_id=start.exec_id, exited=True, error=why)))

        if start.exec_id in self._sessions or not start.command:
            return refuse("a malformed exec request")
        if len(self._sessions) >= MAX_EXECS:
            return refuse(f"the node runs {MAX_EXECS} execs already, the most it takes at once")
        if not self._running(start.task_id, start.attempt):
            return refuse(f"task {start.task_id} (attempt {start.attempt}) is not running on this node")
        session = ExecSession(start, {}, put, put_control)
        task = asyncio.create_task(self._run(session, refuse), name=f"exec-{start.exec_id[:16]}")
        self._sessions[start.exec_id] = (session, task)
        task.add_done_callback(lambda _: self._sessions.pop(start.exec_id, None))

    async def _run(self, session: ExecSession, refuse: Callable[[str], None]) -> None:
        """The target is read off the loop: for an image task it is a question to the docker
        engine, which may hang; heartbeats and other execs go on meanwhile."""
        key = f"{session.start.task_id}.{session.start.attempt}"
        try:
            session.target = await asyncio.to_thread(exec_target, self.runtime, key)
        except ExecRefused as error:
            return refuse(str(error))
        await session.run()

    def feed(self, feed: agent_pb2.ExecFeed) -> None:
        entry = self._sessions.get(feed.exec_id)
        if entry is not None:
            entry[0].feed(feed)

    def cancel_all(self) -> None:
        """The master's stream is gone: no one reads these any more."""
        for session, task in list(self._sessions.values()):
            session.kill()
            task.cancel()

    def __len__(self) -> int:
        return len(self._sessions)
