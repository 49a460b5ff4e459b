"""Node limits are ceilings (`--pids-max`, `--log-max`): the agent's clamp and the
master's submit check, as tables; and the registration that carries the ceilings."""

from __future__ import annotations

import random

import pytest

from tcluster.agent.codec import register_to_pb
from tcluster.domain.ceilings import Ceilings, effective, refusal
from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.actions import Registration
from tcluster.master.core.events import AgentJoined, Now, Submit
from tcluster.master.core.registration import check_registration
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.core.transitions import handle
from tcluster.master.edge.agent_codec import registration_from_pb
from tcluster.domain.model import Job, JobSpec, Task
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import FifoPolicy
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import FirstFit
from tcluster.scheduler.round import schedule_round


@pytest.mark.parametrize("asked, ceiling, applied", [
    (0, 64, 64),               # the job says nothing: the agent's value
    (32, 64, 32),              # a job may lower it
    (64, 64, 64),
    (4_000_000, 64, 64),       # never raise it
    (-1, 64, 64),
    (0, 0, 0),                 # no agent cap (log): nothing
    (2**40, 0, 2**40),         # no agent cap: the job's own cap holds
])
def test_the_agent_applies_at_most_its_own_value(asked: int, ceiling: int, applied: int) -> None:
    assert effective(asked, ceiling) == applied


M = 2**20
NODES = [Ceilings(64, 4 * M), Ceilings(4096, 8 * M)]


@pytest.mark.parametrize("asks, nodes, message", [
    ({"pids_max": 4_000_000}, NODES,
     "pids_max: 4000000 is above every node's ceiling (largest: 4096, tcl-agent --pids-max)"),
    ({"log_max_bytes": 2**40}, NODES,
     f"log_max_bytes: {2**40} is above every node's ceiling (largest: {8 * M}, tcl-agent --log-max)"),
    ({"pids_max": 4096, "log_max_bytes": 8 * M}, NODES, None),    # the largest node allows it
    ({"pids_max": 0, "log_max_bytes": 0}, NODES, None),           # the node's own values
    ({"pids_max": 4_000_000}, [], None),                          # no node yet: it waits
    ({"pids_max": 4_000_000}, [*NODES, Ceilings()], None),        # an older agent: only its clamp can say
    ({"log_max_bytes": 2**40}, [Ceilings(64, 0)], None),          # 0: a node with no log cap
])
def test_submit_refuses_what_no_node_allows(asks: dict[str, int], nodes: list[Ceilings], message: str | None) -> None:
    error = refusal(asks, nodes)
    if message is None:
        assert error is None
    else:
        assert isinstance(error, InvalidArgument) and str(error).startswith(message)
        assert error.field == next(iter(asks))


def test_the_ceilings_travel_in_register_and_an_old_agent_says_none() -> None:
    msg = register_to_pb("n1", Resources(2, 2**30), Resources(), {}, "fake", [], [], "v", Ceilings(64, 4 * M))
    assert registration_from_pb(msg.register).ceilings == Ceilings(64, 4 * M)
    old = register_to_pb("n1", Resources(2, 2**30), Resources(), {}, "fake", [], [], "v")   # fields unset
    assert registration_from_pb(old.register).ceilings == Ceilings()


@pytest.mark.parametrize("ceilings, field", [(Ceilings(-1, 0), "register.pids_max"),
                                              (Ceilings(0, 2**63 - 1), "register.log_max_bytes")])
def test_a_registration_with_bad_ceilings_is_refused_naming_the_field(ceilings: Ceilings, field: str) -> None:
    reg = Registration("n1", Resources(1, 2**30), Resources(), (), "fake", (), ceilings=ceilings)
    with pytest.raises(InvalidArgument, match=f"^{field}: "):
        check_registration(reg)


def test_the_master_keeps_each_nodes_ceilings_and_refuses_above_them() -> None:
    timeouts = Timeouts(node_timeout_s=10, lost_timeout_s=20, start_timeout_s=30, job_retention_s=100,
                        heartbeat_interval_s=1)
    state = MasterState([], [], [], [], timeouts, started_mono=0.0)
    reg = Registration("n1", Resources(4, 2**33), Resources(), (), "fake", (), ceilings=Ceilings(64, 4 * M))
    state.apply(handle(state, AgentJoined(reg), Now(1000.0, 0.0)))
    assert state.nodes["n1"].ceilings == Ceilings(64, 4 * M)
    big = JobSpec(command=("true",), resources=Resources(1, 2**20), pids_max=4_000_000, log_max_bytes=2**40)
    with pytest.raises(InvalidArgument, match="^pids_max: 4000000 is above every node's ceiling"):
        handle(state, Submit("0123abcd", big), Now(1001.0, 1.0))
    small = JobSpec(command=("true",), resources=Resources(1, 2**20), pids_max=32)
    step = handle(state, Submit("0123abcd", small), Now(1001.0, 1.0))
    assert "0123abcd" in step.jobs


def _round(matrix: NodeMatrix, spec: JobSpec) -> tuple[list[str], dict[str, str]]:
    jobs = {"j": Job("j", spec, 0.0)}
    result = schedule_round(jobs, {"j": [Task("j", 0)]}, matrix, FifoPolicy(), FirstFit(), random.Random(0))
    return [node for _, node in result.placements], result.pending_reasons


@pytest.mark.parametrize("asks, down, placed, reason", [
    ({}, (), ["a-small"], ""),                                   # no ask: the first node in order
    ({"pids_max": 32}, (), ["a-small"], ""),                     # the small node allows 32
    ({"pids_max": 1000}, (), ["b-big"], ""),                     # only the big one allows 1000
    ({"log_max_bytes": 8 * M}, (), ["b-big"], ""),
    ({"pids_max": 1000}, ("b-big",), [],                          # its only node is down: it waits, saying why
     "no ready node allows pids_max 1000 (the largest ready allows 64, tcl-agent --pids-max)"),
    ({"pids_max": 1000}, ("b-big", "a-small"), [], "no nodes are ready"),
])
def test_placement_skips_nodes_whose_ceiling_is_below_the_ask(
        asks: dict[str, int], down: tuple[str, ...], placed: list[str], reason: str) -> None:
    matrix = NodeMatrix()
    matrix.upsert("a-small", Resources(4, 2**33), {}, ceilings=Ceilings(64, 4 * M))
    matrix.upsert("b-big", Resources(4, 2**33), {}, ceilings=Ceilings(4096, 64 * M))
    for name in down:
        matrix.set_schedulable(name, False)
    spec = JobSpec(command=("true",), resources=Resources(1, 2**20), **asks)  # type: ignore[arg-type]
    got, reasons = _round(matrix, spec)
    assert got == placed and reasons.get("j", "") == reason


def test_a_node_that_states_no_ceiling_takes_any_ask() -> None:
    matrix = NodeMatrix()
    matrix.upsert("old-agent", Resources(4, 2**33), {})          # an older agent: its own clamp decides
    assert _round(matrix, JobSpec(command=("true",), resources=Resources(1, 2**20), pids_max=10**6))[0] == ["old-agent"]
