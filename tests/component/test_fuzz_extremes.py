"""Fixed extreme-but-well-formed agent messages, each against a fresh in-process master
(its own module, so a broken master here cannot leak errors into the fuzz modules): one
node's capacity or free resources must never break a read (`tcl nodes`) for good."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.component.fuzz_strategies import EXAMPLES, BackgroundMaster, check_alive, register_summary, reply_problem
from tests.component.test_fuzz_agent_stream import _connect
from tcluster.v1 import agent_pb2


def _register(node: str, **fields: object) -> agent_pb2.AgentMessage:
    reg = agent_pb2.Register(node=node)
    reg.capacity.cpu, reg.capacity.memory = 4, 2**33
    for path, value in fields.items():
        holder, _, name = path.rpartition("__")
        target = getattr(reg, holder) if holder else reg
        if name in ("cpu", "memory"):
            setattr(target, name, value)
        else:
            target.other[name] = value
    return agent_pb2.AgentMessage(register=reg)


def _beat(cpu: float, memory: int) -> agent_pb2.AgentMessage:
    beat = agent_pb2.Heartbeat(sent_at=time.time())
    beat.free.cpu, beat.free.memory = cpu, memory
    return agent_pb2.AgentMessage(heartbeat=beat)


EXTREMES: dict[str, list[agent_pb2.AgentMessage]] = {
    "memory int64 max": [_register("extreme", capacity__memory=2**63 - 1)],
    "memory int64 max, reserved -1": [_register("extreme", capacity__memory=2**63 - 1, reserved__memory=-1)],
    "cpu inf": [_register("extreme", capacity__cpu=float("inf"))],
    "cpu 1e308": [_register("extreme", capacity__cpu=1e308)],
    "reserved negative": [_register("extreme", reserved__cpu=-5.0, reserved__memory=-(2**40))],
    "other inf": [_register("extreme", capacity__net=float("inf"))],
    "heartbeat free int64 max": [_register("extreme"), _beat(4, 2**63 - 1)],
    "heartbeat free nan/-inf": [_register("extreme"), _beat(float("nan"), -(2**63))],
}


@pytest.mark.parametrize("case", sorted(EXTREMES))
def test_extreme_capacity_keeps_every_read_working(tmp_path: Path, case: str, request: pytest.FixtureRequest) -> None:
    """A node registering an extreme but well-formed capacity is accepted or refused, and
    then Submit, Get, List, ListNodes and ListQueues still answer, also after a restart
    (the node is stored): one agent cannot break `tcl nodes` for good."""
    register_summary(request.config)
    running = BackgroundMaster(tmp_path)
    try:
        EXAMPLES["Connect/extreme"] += 1
        code, details = _connect(running, EXTREMES[case])
        assert reply_problem(code, details) is None, f"{case}: {reply_problem(code, details)}"
        check_alive(running, case)
        running.restart()
        check_alive(running, f"{case}, after a restart")
    finally:
        running.close()
