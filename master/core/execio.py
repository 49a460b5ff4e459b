"""The messages of `tcl exec` between the master and an agent (agent.proto "exec"), as
values: what the master sends (StartExec, FeedExec) and what it receives (ExecPiece)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StartExec:
    exec_id: str
    task_id: str
    attempt: int
    command: tuple[str, ...]
    tty: bool
    rows: int
    cols: int
    window: int                 # output messages the agent may send ahead of credit
    term: str = ""


@dataclass(frozen=True)
class FeedExec:
    """stdin, a resize (rows > 0), credit for output taken, or the client gone (cancel)."""
    exec_id: str
    stdin: bytes = b""
    stdin_eof: bool = False
    rows: int = 0
    cols: int = 0
    credit: int = 0
    cancel: bool = False


@dataclass(frozen=True)
class ExecPiece:
    """One ExecData from the agent. `stdin_credit` alone: the command took stdin."""
    exec_id: str
    stdout: bytes = b""
    stderr: bytes = b""
    started: bool = False
    exited: bool = False
    exit_code: int | None = None
    signal: int = 0
    error: str = ""
    stdin_credit: int = 0

    @property
    def size(self) -> int:
        return len(self.stdout) + len(self.stderr)
