"""`tcl-agent --master a,b`: which master each connect dials, and the lists in settings and
joined state."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tcluster.agent.joinstate import JoinedState, NodeCredentials, agent_address, save_joined
from tcluster.agent.main import build_parser, settings_from_args
from tcluster.agent.masters import MasterRotation
from tcluster.agent.settings import AgentSettings
from tcluster.domain.errors import InvalidArgument
from tcluster.security import nodekeys, pki


def dial(rotation: MasterRotation, outcomes: list[str | None | bool]) -> list[tuple[str, bool]]:
    """Each outcome: True (registered, then the session ended), a hint ("" or an address) or
    None (unreachable). -> [(address dialled, backed off after it)]."""
    out = []
    for outcome in outcomes:
        address = rotation.next()
        if outcome is True:
            rotation.connected()
        out.append((address, rotation.ended(None if outcome is True else outcome)))
    return out


def test_one_master_backs_off_after_every_failure_as_before() -> None:
    assert dial(MasterRotation(("a:1",)), [None, None, True, None]) == [
        ("a:1", True), ("a:1", True), ("a:1", True), ("a:1", True)]


def test_round_robin_backs_off_only_after_a_full_round() -> None:
    assert dial(MasterRotation(("a:1", "b:1", "c:1")), [None, "", None, None, True, None]) == [
        ("a:1", False), ("b:1", False), ("c:1", True), ("a:1", False), ("b:1", False), ("c:1", False)]


def test_a_hint_comes_first_even_off_the_list_and_costs_no_wait() -> None:
    # The session that registered and ended counts in the next round: a:1 then completes it.
    assert dial(MasterRotation(("a:1", "b:1")), [None, "z:9", True, None, None]) == [
        ("a:1", False), ("b:1", False), ("z:9", False), ("a:1", True), ("b:1", False)]
    assert dial(MasterRotation(("a:1",)), ["z:9", True]) == [("a:1", False), ("z:9", True)]


def test_hints_that_lead_nowhere_still_back_off() -> None:
    backoffs = [backed for _, backed in dial(MasterRotation(("a:1", "b:1")), ["b:1", "a:1", "b:1", "a:1"])]
    assert backoffs == [False, False, False, True]


def test_settings_take_a_list_and_name_a_bad_entry() -> None:
    settings = AgentSettings(master="a:7071, b:7071", cpus=1, memory_bytes=2**30)
    assert settings.master == "a:7071,b:7071"
    with pytest.raises(ValidationError, match="'b' is not HOST:PORT"):
        AgentSettings(master="a:7071,b", cpus=1, memory_bytes=2**30)


def test_the_flag_takes_a_list(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--master", "a:7071,b:7071", "--state-dir", str(tmp_path), "--cpus", "1",
                                      "--memory", "1Gi"])
    assert settings_from_args(args).master == "a:7071,b:7071"
    args.master = "a:7071,,b:7071"
    with pytest.raises(InvalidArgument, match="--master: .*empty entry"):
        settings_from_args(args)


def test_a_join_with_a_list_keeps_every_master(tmp_path: Path) -> None:
    assert agent_address("a:7070,b:7070", 7071) == "a:7071,b:7071"
    master = pki.init_pki(tmp_path / "master", [])
    key, csr = nodekeys.make_node_csr("n1")
    state_dir = tmp_path / "agent"
    save_joined(state_dir, JoinedState("a:7070,b:7070", "a:7071,b:7071", "n1", master.fingerprint),
                NodeCredentials(master.ca_pem, pki.issue_node_cert(master, csr, "n1"), key))
    base = ["--state-dir", str(state_dir), "--cpus", "1", "--memory", "1Gi"]
    assert settings_from_args(build_parser().parse_args(base)).master == "a:7071,b:7071"
    other_routes = build_parser().parse_args([*base, "--master", "x:7070,y:7070"])
    assert settings_from_args(other_routes).master == "x:7071,y:7071"
