"""The agent's side of `tcl exec` (agent/execs.py) with a real helper process but no task
container (no cgroup, no namespaces, the agent's user): output goes up only with credit,
and a cancel kills the command's whole session."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from tcluster.agent.execs import ExecSession
from tcluster.v1 import agent_pb2

TARGET: dict[str, Any] = {"procs": [], "groups": [], "task_pid": 0, "ns": False, "cwd": "/",
                          "env": {"PATH": "/usr/bin:/bin"}}


async def _until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


def test_output_waits_for_credit_then_the_exit_comes_last() -> None:
    async def scenario() -> list[agent_pb2.ExecData]:
        sent: list[agent_pb2.ExecData] = []

        async def put(message: agent_pb2.AgentMessage) -> None:
            sent.append(message.exec_data)

        start = agent_pb2.ExecStart(exec_id="e1", task_id="t.0", attempt=1, window=2,
                                    command=["sh", "-c", "head -c 1000000 /dev/zero; exit 5"])
        session = ExecSession(start, TARGET, put, lambda m: None)
        run = asyncio.create_task(session.run())
        await _until(lambda: len(sent) == 2, "the window's two messages")
        for _ in range(20):                       # no credit: nothing more, however long it waits
            await asyncio.sleep(0.05)
        assert len(sent) == 2 and sent[0].started
        session.feed(agent_pb2.ExecFeed(exec_id="e1", credit=10_000))
        await asyncio.wait_for(run, 60)
        return sent

    sent = asyncio.run(scenario())
    assert sum(len(d.stdout) for d in sent) == 1_000_000
    assert sent[-1].exited and sent[-1].has_exit_code and sent[-1].exit_code == 5
    assert not any(d.exited for d in sent[:-1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_a_cancel_kills_the_commands_whole_session(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    async def scenario() -> list[int]:
        async def put(message: agent_pb2.AgentMessage) -> None:
            return None

        start = agent_pb2.ExecStart(exec_id="e2", task_id="t.0", attempt=1, window=8,
                                    command=["sh", "-c", f"sleep 1001 & echo $! > {pids}.tmp; mv {pids}.tmp {pids}; "
                                                         "sleep 1002"])
        session = ExecSession(start, TARGET, put, lambda m: None)
        run = asyncio.create_task(session.run())
        await _until(pids.exists, "the command started its background sleep")
        session.feed(agent_pb2.ExecFeed(exec_id="e2", cancel=True))
        await asyncio.wait_for(run, 60)
        return [int(pids.read_text())]

    for pid in asyncio.run(scenario()):
        for _ in range(200):
            if not _alive(pid):
                break
            asyncio.run(asyncio.sleep(0.05))
        else:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the background sleep {pid} outlived the cancel")


class _HungEngine:
    """A docker engine whose inspect answers only when released: the agent's loop must not wait on it."""
    parent = "tcluster/n.docker"

    def __init__(self) -> None:
        import threading
        self.release = threading.Event()

    def containers(self) -> list[str]:
        return ["t.0.1"]

    def _find(self, key: str) -> dict[str, Any]:
        self.release.wait(5)
        return {"State": {"Running": False, "Pid": 0}}


def test_a_hung_docker_engine_does_not_stall_the_agents_loop() -> None:
    from tcluster.agent.execs import Execs

    async def scenario() -> tuple[int, list[agent_pb2.AgentMessage]]:
        engine = _HungEngine()
        refused: list[agent_pb2.AgentMessage] = []

        async def put(message: agent_pb2.AgentMessage) -> None:
            refused.append(message)

        execs = Execs(type("Runtime", (), {"docker": engine, "native": object()})(), lambda task, attempt: True)
        execs.start(agent_pb2.ExecStart(exec_id="e1", task_id="t.0", attempt=1, window=2, command=["true"]),
                    put, refused.append)
        assert not refused                        # start() returned without the engine's answer
        ticks = 0
        for _ in range(10):                       # the loop runs while the engine is asked
            await asyncio.sleep(0.01)
            ticks += 1
        engine.release.set()
        await _until(lambda: bool(refused), "the refusal once the engine answers")
        return ticks, refused

    ticks, refused = asyncio.run(scenario())
    assert ticks == 10
    assert refused[0].exec_data.exited and "has no running container" in refused[0].exec_data.error
