"""The live LM's sans-IO parts (master/features/federation_lm.py, master/core/pinning.py) and its
settings: layouts from the master's nodes, epochs, adopted tasks, pinned rounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tcluster.domain.errors import InvalidArgument
from tcluster.federation.messages import Inconsistent, InternalLaunch, TaskLaunched, Refused, TaskRequest, Why
from tcluster.master.core.pinning import (
    FED_GM, FED_TASK, FEDERATION_OWNER, PIN_NODE, check_user_labels, pinned_node,
)
from tcluster.master.features.federation_lm import (
    FederationLM, FedRun, build_layout, epoch_floor, fed_labels, federated_run, mask_of, res_of, resources_of,
)
from tcluster.master.app.main import build_parser, settings_from_args
from tcluster.master.settings import MasterSettings
from tcluster.master.core.actions import TaskReport
from tcluster.master.core.events import Cancel, Reports
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState
from tcluster.domain.resources import Resources

GIB = 2**30


def node(name: str, cpu: float = 4, labels: dict[str, str] | None = None) -> Node:
    return Node(name=name, capacity=Resources(cpu, 8 * GIB), labels=tuple(sorted((labels or {}).items())))


def test_resources_are_millicores_and_mib_both_ways() -> None:
    assert res_of(Resources(1.5, 3 * 2**20 + 5)) == (1500, 3)
    assert resources_of((250, 512)) == Resources(0.25, 512 * 2**20)


def test_the_layout_orders_nodes_by_name_interleaves_owners_and_maps_labels_to_bits() -> None:
    live = build_layout(2, "east", 2, 7, [node("b", labels={"rack": "r2"}), node("a", labels={"rack": "r1", "ssd": "y"}),
                                         node("c")])
    assert live.names == ("a", "b", "c") and live.layout.owner == (0, 1, 0) and live.epoch == 7
    assert live.constraints == ("rack=r1", "rack=r2", "ssd=y")
    assert [n.cmask for n in live.layout.nodes] == [0b101, 0b010, 0] and live.layout.nodes[0].cap == (4000, 8192)
    assert mask_of(["ssd=y", "rack=r1"], live.constraints) == 0b101
    assert mask_of(["gpu=a100"], live.constraints) is None           # no node of this LM has it


def test_the_vocabulary_is_capped_at_64_constraints() -> None:
    live = build_layout(0, "lm0", 1, 1, [node(f"n{i}", labels={"id": f"{i:03d}"}) for i in range(70)])
    assert len(live.constraints) == 64 and live.layout.nodes[live.index("n69")].cmask == 0


def fed_job(job_id: str, task_id: str, gm: int, node_name: str, state: TaskState, cpu: float = 1) -> tuple[Job, list[Task]]:
    spec = JobSpec(command=("x",), resources=Resources(cpu, GIB), owner=FEDERATION_OWNER,
                   labels=fed_labels(gm, task_id, "a", node_name))
    return Job(id=job_id, spec=spec, submitted_at=1.0), [Task(job_id=job_id, index=0, state=state, node=node_name)]


def test_a_federated_job_is_known_by_its_labels_and_only_the_federation_may_pin() -> None:
    job, tasks = fed_job("j1", "f0-1.0", 1, "b", TaskState.RUNNING)
    run = federated_run(job, tasks)
    assert run == FedRun(TaskRequest("f0-1.0", "a", (1000, 1024)), 1, "b", "j1", waiting=False)
    assert federated_run(job, [Task(job_id="j1", index=0, state=TaskState.SUCCEEDED)]) is None
    assert federated_run(*fed_job("j2", "f0-2.0", 0, "b", TaskState.PENDING)).waiting
    user = JobSpec(command=("x",), resources=Resources(1, GIB), owner="alice", labels=((PIN_NODE, "b"),))
    assert pinned_node(user) == "" and pinned_node(job.spec) == "b"


@pytest.mark.parametrize("key", [PIN_NODE, FED_GM, FED_TASK, "tcluster.io/anything"])
def test_a_user_may_not_set_reserved_job_labels(key: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^labels: .* is reserved"):
        check_user_labels([("team", "x"), (key, "v")])
    check_user_labels([("team", "x")])


def lm_over(nodes: dict[str, Node], room: dict[str, tuple[int, int]]) -> FederationLM:
    fed = FederationLM(4, "lm4", 2, lambda name: room[name], epoch=0)
    fed.sync(nodes, lambda: [], 1000, force=True)
    return fed


def test_a_new_node_set_is_a_new_epoch_that_keeps_answers_and_adopts_tasks_with_derived_logical_nodes() -> None:
    nodes = {"a": node("a"), "b": node("b")}
    room = {"a": (4000, 8192), "b": (4000, 8192), "c": (4000, 8192)}
    fed = lm_over(nodes, room)
    assert fed.live.epoch == 1000 and not fed.sync(nodes, lambda: [], 5)       # same nodes: same epoch
    first, _ = fed.check.handle(InternalLaunch("f0-1.0:0", 0, 1000, 0, TaskRequest("f0-1.0", "a", (1000, 1024))))
    assert isinstance(first, TaskLaunched)
    # c joins: "a" stays GM 0's, "b" GM 1's, "c" GM 0's; a task of GM 1 on "c" sits on a logical node.
    runs = [FedRun(TaskRequest("f0-1.0", "a", (1000, 1024)), 0, "a", "j1", False),
            FedRun(TaskRequest("f1-1.0", "b", (500, 10)), 1, "c", "j2", False)]
    assert fed.sync({**nodes, "c": node("c")}, lambda: runs, 5)
    assert fed.live.epoch == 1001 and fed.live.names == ("a", "b", "c")
    assert fed.check.handle(InternalLaunch("f0-1.0:0", 0, 1000, 0, TaskRequest("f0-1.0", "a", (1000, 1024))))[0] is first
    assert [(n.phys, n.owner, n.task_id) for n in fed.check.state().logical] == [(2, 1, "f1-1.0")]
    assert dict(fed.check.state().usage) == {"a": (1000, 1024), "b": (500, 10)}


def test_room_promised_to_a_waiting_pinned_task_is_not_offered_again() -> None:
    room = {"a": (4000, 8192), "b": (4000, 8192)}
    fed = lm_over({"a": node("a"), "b": node("b")}, room)
    fed.set_waiting("a", "f0-1.0", (3000, 100))
    answer, _ = fed.check.handle(InternalLaunch("r:0", 0, 1000, 0, TaskRequest("f0-2.0", "a", (2000, 100))))
    assert isinstance(answer, Inconsistent) and answer.why is Why.INSUFFICIENT and answer.state.free[0] == (1000, 8092)
    fed.set_waiting("a", "f0-1.0", None)
    fed.check.touch()
    assert fed.check.state().free[0] == (4000, 8192) and fed.waiting == {}


def test_the_flags_and_their_errors(tmp_path: Path) -> None:
    s = settings_from_args(build_parser().parse_args(["--federation-lm-id", "2", "--federation-gms", "3",
                                                      "--federation-state-interval-s", "0.5"]))
    assert (s.federation_lm_id, s.lm_name, s.federation_gms, s.federation_state_interval_s) == (2, "lm2", 3, 0.5)
    assert settings_from_args(build_parser().parse_args([])).federation_lm_id is None
    assert MasterSettings(federation_lm_id=0, federation_lm_name="west").lm_name == "west"
    for bad in (dict(federation_gms=0), dict(federation_lm_id=-1), dict(federation_lm_name="a b"),
                dict(federation_state_interval_s=0)):
        with pytest.raises(ValidationError):
            MasterSettings(**bad)


# ---- SubmitPinned and the pinned round (master/core/transitions.py, pinning.py) ----

def pinned_spec(node_name: str, cpu: float, task_id: str = "f0-1.0") -> JobSpec:
    return JobSpec(("sleep", "9"), Resources(cpu, 2**20), owner=FEDERATION_OWNER,
                   labels=fed_labels(0, task_id, "a", node_name))


def test_a_pinned_job_starts_at_once_on_its_node_or_waits_for_that_node_only() -> None:
    from tcluster.master.core.events import Launch as LaunchAction, Place, SubmitPinned
    from tcluster.master.core.pinning import pinned_round
    from tests.unit.test_master_transitions import World
    w = World()
    w.join("n1")
    w.join("n2")
    step = w.do(SubmitPinned("aaaa0001", pinned_spec("n2", 3), "n2"))
    assert [(a.task_id, a.node) for a in step.actions if isinstance(a, LaunchAction)] == [("aaaa0001.0", "n2")]
    step = w.do(SubmitPinned("aaaa0002", pinned_spec("n2", 2, "f0-2.0"), "n2"))     # 1 core left on n2
    assert not [a for a in step.actions if isinstance(a, LaunchAction)]
    assert w.state.task("aaaa0002.0").state is TaskState.PENDING
    pinned, places, reasons = pinned_round(w.state)
    assert pinned == {"aaaa0002"} and places == [] and "pinned to node n2" in reasons["aaaa0002"]
    w.do(Cancel("aaaa0001"))                   # its room comes back once the kill is confirmed
    w.do(Reports("n2", (TaskReport("aaaa0001.0", 1, TaskState.KILLED, exit_code=None),), 1))
    pinned, places, _ = pinned_round(w.state)
    assert places == [("aaaa0002.0", "n2")]    # never n1, though n1 had room all along
    w.do(Place(tuple(places)))
    assert w.state.task("aaaa0002.0").node == "n2"


def test_a_gm_that_reads_too_slowly_is_cut_off_not_buffered_without_bound() -> None:
    import asyncio
    from tcluster.master.features.federation_live import Subscription
    sub = Subscription(0, "slow", queue=asyncio.Queue(2))
    for k in range(5):
        sub.put(k)      # type: ignore[arg-type]
    assert sub.closed and sub.queue.qsize() == 1 and sub.queue.get_nowait() is None


def test_a_new_leader_starts_one_lease_above_the_old_leaders_epochs_and_refuses_them() -> None:
    """The old leader published up to its lease deadline by its own clock; the new one
    (its clock 2 s behind, lease 5 s) still starts above, so the GM's old-epoch Place is
    refused StaleEpoch, not applied to a layout it was not computed on."""
    assert epoch_floor(100.0) == 100_000 and epoch_floor(100.0, 5) == 105_000
    nodes = {"a": node("a"), "b": node("b")}
    room = {"a": (4000, 8192), "b": (4000, 8192)}
    old = FederationLM(0, "lm0", 1, lambda n: room[n], 0)
    old.sync(nodes, lambda: [], epoch_floor(100.0, 5), force=True)
    old.sync({**nodes, "c": node("c")}, lambda: [], epoch_floor(105.0))      # a layout change at its deadline
    new = FederationLM(0, "lm0", 1, lambda n: room[n], 0)
    new.sync(nodes, lambda: [], epoch_floor(103.0, 5), force=True)            # takeover, clock 2 s behind
    assert new.live.epoch > old.live.epoch
    answer, _ = new.check.handle(InternalLaunch("f0-1.0:0", 0, old.live.epoch, 0, TaskRequest("f0-1.0", "a", (100, 16))))
    assert isinstance(answer, Refused) and answer.epoch == new.live.epoch
