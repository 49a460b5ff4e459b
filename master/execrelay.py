"""`tcl exec`: a command inside a running task, its stdio relayed between the client's
Exec stream and the task's agent, flow-controlled both ways as logs are (master/logstream.py).

Output: the agent sends at most EXEC_WINDOW messages (64 KiB each at most) ahead of the
credit the master grants, one each time its client took one; so a client that stops reading
stops the command (its pipe fills), and the master holds at most the window per exec.
Input: the master reads the client's next stdin message only once the agent has room for
it (stdin credit, the same window). Each task may have at most `--execs-per-task` open, each
user `--execs-per-user`: the master's memory for execs is bounded per user, whatever the
clients do. A client that leaves cancels the exec: the agent kills the command's session."""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tcluster.domain.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from tcluster.master.core.execio import ExecPiece, FeedExec, StartExec

EXEC_WINDOW = 8                  # x 64 KiB: at most 512 KiB of one exec's output in the master
MAX_STDIN_BYTES = 64 * 1024      # one stdin message
MAX_COMMAND_BYTES = 64 * 1024    # the whole argv
MAX_TTY_SIDE = 4096              # rows or columns


@dataclass(frozen=True)
class ExecOpened:
    job_id: str
    task_index: int
    command: tuple[str, ...]
    tty: bool = False
    rows: int = 0
    cols: int = 0
    term: str = ""


@dataclass(frozen=True)
class Stdin:
    data: bytes


@dataclass(frozen=True)
class StdinEnd:
    pass


@dataclass(frozen=True)
class Resize:
    rows: int
    cols: int


ExecInput = Stdin | StdinEnd | Resize


@dataclass(frozen=True)
class Output:
    data: bytes
    stderr: bool = False


@dataclass(frozen=True)
class Running:
    node: str


@dataclass(frozen=True)
class Ended:
    exit_code: int | None
    signal: int = 0
    error: str = ""


ExecOutput = Output | Running | Ended


def check_opened(opened: ExecOpened) -> None:
    if not opened.command or not opened.command[0]:
        raise InvalidArgument("command", "exec needs a command (after --)")
    if sum(len(a.encode()) for a in opened.command) > MAX_COMMAND_BYTES:
        raise InvalidArgument("command", f"longer than {MAX_COMMAND_BYTES} bytes")
    if any("\0" in a for a in opened.command):
        raise InvalidArgument("command", "contains a NUL byte")
    for name, side in (("rows", opened.rows), ("cols", opened.cols)):
        if not 0 <= side <= MAX_TTY_SIDE:
            raise InvalidArgument(name, f"{side} is not within 0..{MAX_TTY_SIDE}")


def check_input(item: ExecInput) -> None:
    if isinstance(item, Stdin) and len(item.data) > MAX_STDIN_BYTES:
        raise InvalidArgument("stdin", f"a message of {len(item.data)} bytes; at most {MAX_STDIN_BYTES}")
    if isinstance(item, Resize) and not (0 < item.rows <= MAX_TTY_SIDE and 0 < item.cols <= MAX_TTY_SIDE):
        raise InvalidArgument("resize", f"{item.rows}x{item.cols} is not within 1..{MAX_TTY_SIDE}")


class ExecChannel:
    """One exec's agent side in the master: its output not yet taken by the client (at most
    `window` messages) and the stdin credit the agent granted."""

    def __init__(self, exec_id: str, window: int) -> None:
        self.exec_id = exec_id
        self.window = window
        self._pieces: deque[ExecPiece] = deque()
        self._end: ExecPiece | None = None
        self._ready = asyncio.Event()
        self._stdin_left = window
        self._stdin_room = asyncio.Event()

    def deliver(self, piece: ExecPiece) -> None:
        if piece.stdin_credit:          # never beyond the window, whatever the node says
            self._stdin_left = min(self.window, self._stdin_left + piece.stdin_credit)
            self._stdin_room.set()
        if not (piece.size or piece.started or piece.exited or piece.error) or self._end is not None:
            return
        if len(self._pieces) >= self.window:
            self._pieces.clear()        # the agent ignored its window: end rather than grow
            self.end(f"the node sent more than the {self.window} exec messages it was granted")
            return
        self._pieces.append(piece)
        self._ready.set()

    def end(self, error: str) -> None:
        if self._end is None:
            self._end = ExecPiece(self.exec_id, exited=True, error=error)
            self._ready.set()
            self._stdin_room.set()

    def held(self) -> int:
        return len(self._pieces)

    def held_bytes(self) -> int:
        return sum(p.size for p in self._pieces)

    async def get(self) -> ExecPiece:
        while not self._pieces and self._end is None:
            self._ready.clear()
            await self._ready.wait()
        return self._pieces.popleft() if self._pieces else self._end  # type: ignore[return-value]

    async def take_stdin(self) -> bool:
        """Waits for room for one stdin message at the agent; False once the exec ended."""
        while self._stdin_left <= 0 and self._end is None:
            self._stdin_room.clear()
            await self._stdin_room.wait()
        if self._end is not None:
            return False
        self._stdin_left -= 1
        return True


class ExecCap:
    """Open execs per task and per user; one over either cap is refused."""

    def __init__(self, per_task: int, per_user: int) -> None:
        self.per_task, self.per_user = per_task, per_user
        self._tasks: dict[str, int] = {}
        self._users: dict[str, int] = {}
        self.channels: dict[str, ExecChannel] = {}

    @contextmanager
    def hold(self, user: str, task_id: str) -> Iterator[None]:
        if self._users.get(user, 0) >= self.per_user:
            raise ResourceExhausted(f"{user} already has {self.per_user} execs open, the most one user may at once "
                                    "(--execs-per-user); end one first")
        if self._tasks.get(task_id, 0) >= self.per_task:
            raise ResourceExhausted(f"task {task_id} already has {self.per_task} execs open, the most one task "
                                    "may at once (--execs-per-task); end one first")
        for counts, key in ((self._users, user), (self._tasks, task_id)):
            counts[key] = counts.get(key, 0) + 1
        try:
            yield
        finally:
            for counts, key in ((self._users, user), (self._tasks, task_id)):
                left = counts.pop(key) - 1
                if left:
                    counts[key] = left

    def buffered_bytes(self) -> int:
        """What the master holds of every open exec's output."""
        return sum(c.held_bytes() for c in self.channels.values())


class Link:
    """What the relay needs of an agent's link (master/links.py AgentLink)."""
    node: str

    def send(self, message: StartExec | FeedExec) -> None: ...
    def open_exec(self, channel: ExecChannel) -> None: ...
    def close_exec(self, exec_id: str) -> None: ...


async def relay(link: Link, cap: ExecCap, start: StartExec, inputs: AsyncIterator[ExecInput]) -> AsyncIterator[ExecOutput]:
    """Starts `start` on `link`'s node and yields its output; the client's inputs go down
    as the agent grants room. Ends with one Ended."""
    channel = ExecChannel(start.exec_id, start.window)
    cap.channels[start.exec_id] = channel
    link.open_exec(channel)
    link.send(start)
    feeder = asyncio.create_task(_feed(link, channel, inputs))
    ended = False
    try:
        while True:
            piece = await channel.get()
            if piece.exited:
                ended = True
                yield Ended(piece.exit_code, piece.signal, piece.error)
                return
            if piece.started:
                yield Running(link.node)
            if piece.stdout:
                yield Output(piece.stdout)
            if piece.stderr:
                yield Output(piece.stderr, stderr=True)
            link.send(FeedExec(start.exec_id, credit=1))      # taken: room for one more
    finally:
        feeder.cancel()
        cap.channels.pop(start.exec_id, None)
        link.close_exec(start.exec_id)
        if not ended:                   # the client left: the node kills the command
            link.send(FeedExec(start.exec_id, cancel=True))


async def _feed(link: Link, channel: ExecChannel, inputs: AsyncIterator[ExecInput]) -> None:
    """The client's stdin (one message per stdin credit) and resizes, in order."""
    try:
        async for item in inputs:
            if isinstance(item, Resize):
                link.send(FeedExec(channel.exec_id, rows=item.rows, cols=item.cols))
                continue
            if not await channel.take_stdin():
                return
            if isinstance(item, Stdin):
                link.send(FeedExec(channel.exec_id, stdin=item.data))
            else:
                link.send(FeedExec(channel.exec_id, stdin_eof=True))
                return
    except InvalidArgument as error:
        channel.end(str(error))
    except Exception:                   # the client's stream broke: the output side ends the exec
        return


def new_exec_id() -> str:
    return secrets.token_hex(8)


def not_running(task_id: str, state: str) -> FailedPrecondition:
    return FailedPrecondition(f"task {task_id} is {state}: exec runs a command inside a RUNNING task only")
