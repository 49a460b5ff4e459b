"""Simulated agents in several processes (each its own asyncio loop and channels),
controlled from the driver over pipes: start, snapshot the stats, stop."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from testkit.loadgen.agents import Fleet, FleetStats, merge
from testkit.loadgen.procstat import cpu_seconds


@dataclass(frozen=True)
class FleetConfig:
    address: str
    agents: int
    processes: int
    cpu: float
    memory: int
    streams_per_channel: int = 100
    prefix: str = "sim"
    connect_rate: float = 2000.0     # new streams a second, over all processes
    legacy: bool = False             # agents of the previous protocol (no features: heartbeats, single launches)


def _names(config: FleetConfig, worker: int) -> list[str]:
    return [f"{config.prefix}-{i:05d}" for i in range(worker, config.agents, config.processes)]


def _worker(conn: Connection, config: FleetConfig, worker: int) -> None:
    asyncio.run(_serve(conn, config, worker))


async def _serve(conn: Connection, config: FleetConfig, worker: int) -> None:
    loop = asyncio.get_running_loop()
    fleet = Fleet(config.address, _names(config, worker), config.cpu, config.memory, config.streams_per_channel,
                  legacy=config.legacy)
    commands: asyncio.Queue[object] = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    starter = asyncio.create_task(fleet.start(config.connect_rate / config.processes))
    try:
        while True:
            command = await commands.get()
            if command == "stop":
                break
            if command == "snapshot":
                conn.send(fleet.snapshot())
            elif command == "peek":
                conn.send(fleet.snapshot(reset=False))
            elif command == "counts":
                conn.send(fleet.counts())
    finally:
        starter.cancel()
        loop.remove_reader(conn.fileno())
        await fleet.stop()
        conn.send("stopped")


class FleetProcesses:
    """The driver's handle on the worker processes."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        ctx = mp.get_context("spawn")     # no gRPC state inherited through fork
        self.conns: list[Connection] = []
        self.procs: list[mp.process.BaseProcess] = []
        for worker in range(config.processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, config, worker), name=f"loadgen-{worker}", daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def _ask(self, command: str) -> list[object]:
        for conn in self.conns:
            conn.send(command)
        return [conn.recv() for conn in self.conns]

    def counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for part in self._ask("counts"):
            for key, value in part.items():  # type: ignore[attr-defined]
                total[key] = total.get(key, 0) + value
        return total

    def registered(self) -> int:
        return self.counts()["registered"]

    def wait_registered(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while (count := self.registered()) < self.config.agents and time.monotonic() < deadline:
            time.sleep(0.25)
        return count

    def snapshot(self) -> FleetStats:
        return merge(self._ask("snapshot"))  # type: ignore[arg-type]

    def peek(self) -> FleetStats:
        return merge(self._ask("peek"))  # type: ignore[arg-type]

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def stop(self) -> None:
        for conn in self.conns:
            try:
                conn.send("stop")
            except OSError:
                pass
        for conn, proc in zip(self.conns, self.procs):
            try:
                if conn.poll(20):
                    conn.recv()
            except (EOFError, OSError):
                pass
            proc.join(10)
            if proc.is_alive():
                os.kill(proc.pid, 9)   # our own child, by pid
                proc.join(5)
