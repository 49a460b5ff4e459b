"""Master lists (`--master a,b,c`) and the CLI's leader finding, over a fake transport."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import grpc
import pytest

from tcluster.cli.client import check_master_list, explain_rpc_error, is_unreachable
from tcluster.cli import leader
from tcluster.cli.leader import LeaderFinder, NoLeaderError
from tcluster.cli.main import build_parser, main
from tcluster.domain.errors import InvalidArgument
from tcluster.daemonkit.leaders import parse_addresses, standby_hint


class FakeError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__()
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing


REFUSED = FakeError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; connection refused")


def standby(leader: str) -> FakeError:
    said = f"the leader is at {leader}" if leader else "no master leads yet (election in progress)"
    return FakeError(grpc.StatusCode.UNAVAILABLE, f"this master is a standby; {said}", (("tcl-leader", leader),))


@dataclass
class FakeCluster:
    """address -> what it answers: an error to raise, or "ok" (it leads)."""

    answers: dict[str, object]
    asked: list[str] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    now: float = 0.0

    def attempt(self, address: str) -> str:
        self.asked.append(address)
        answer = self.answers.get(address, REFUSED)
        if isinstance(answer, Exception):
            raise answer
        return f"{answer} from {address}"

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def finder(self, *masters: str, wait_s: float = 10.0) -> LeaderFinder:
        return LeaderFinder(masters, wait_s, sleep=self.sleep, clock=lambda: self.now)


@pytest.fixture(autouse=True)
def _fresh_process() -> Iterator[None]:
    """Each test starts from the master lists alone, with no leader remembered from another."""
    leader._last_leader.clear()
    yield
    leader._last_leader.clear()


@pytest.mark.parametrize(("text", "expected"), [
    ("a:7070", ("a:7070",)),
    ("a:7070,b:7070, c:7070", ("a:7070", "b:7070", "c:7070")),
    ("a:1,a:1,b:2", ("a:1", "b:2")),
    ("[::1]:7070,10.0.0.2:7070", ("[::1]:7070", "10.0.0.2:7070")),
    ("unix:/run/a,b.sock", ("unix:/run/a,b.sock",)),
])
def test_address_lists(text: str, expected: tuple[str, ...]) -> None:
    assert parse_addresses(text) == expected
    assert check_master_list(text) == ",".join(expected)


@pytest.mark.parametrize(("text", "named"), [("a:7070,b", "'b'"), ("a:7070,,b:1", "empty entry"),
                                             ("a:7070,b:99999", "'b:99999'"), ("", "no master address")])
def test_a_bad_entry_is_named(text: str, named: str) -> None:
    with pytest.raises(InvalidArgument, match="--master") as info:
        parse_addresses(text)
    assert named in str(info.value)


def test_a_bad_list_is_a_usage_error(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["--master", "127.0.0.1:1,nope", "jobs"]) == 2
    assert "'nope' is not HOST:PORT" in capsys.readouterr().err
    monkeypatch.setenv("TCL_MASTER", "127.0.0.1:1,:7")
    assert main(["jobs"]) == 2
    assert "':7' is not HOST:PORT" in capsys.readouterr().err


def test_wait_leader_s_from_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TCL_WAIT_LEADER_S", raising=False)
    assert build_parser().parse_args(["jobs"]).wait_leader_s == 10.0
    assert build_parser().parse_args(["jobs", "--wait-leader-s", "2.5"]).wait_leader_s == 2.5
    monkeypatch.setenv("TCL_WAIT_LEADER_S", "0")
    assert build_parser().parse_args(["jobs"]).wait_leader_s == 0.0
    monkeypatch.setenv("TCL_WAIT_LEADER_S", "soon")
    assert main(["jobs"]) == 2


def test_standby_hint_reads_the_trailing_metadata() -> None:
    assert standby_hint(standby("b:7070")) == "b:7070"
    assert standby_hint(standby("")) == ""
    assert standby_hint(REFUSED) is None
    assert standby_hint(FakeError(grpc.StatusCode.UNAVAILABLE, "agent on node n2 is unreachable")) is None
    assert standby_hint(FakeError(grpc.StatusCode.NOT_FOUND, "x", (("tcl-leader", "b:1"),))) is None


def test_the_list_is_tried_in_order_past_masters_that_cannot_be_reached() -> None:
    cluster = FakeCluster({"c:1": "ok"})
    assert cluster.finder("a:1", "b:1", "c:1").call(cluster.attempt) == "ok from c:1"
    assert cluster.asked == ["a:1", "b:1", "c:1"] and cluster.sleeps == []


def test_a_hint_is_followed_at_once_even_off_the_list_and_remembered() -> None:
    cluster = FakeCluster({"a:1": standby("z:9"), "b:1": standby("z:9"), "z:9": "ok"})
    finder = cluster.finder("a:1", "b:1")
    assert finder.call(cluster.attempt) == "ok from z:9"
    assert cluster.asked == ["a:1", "z:9"]
    assert finder.call(cluster.attempt) == "ok from z:9"      # the next call starts at the last leader
    assert cluster.asked == ["a:1", "z:9", "z:9"]
    assert cluster.finder("a:1", "b:1").current == "z:9"     # kept per process, for this list


def test_the_masters_answer_is_final_when_it_is_not_about_leadership() -> None:
    denied = FakeError(grpc.StatusCode.PERMISSION_DENIED, "not yours")
    busy = FakeError(grpc.StatusCode.UNAVAILABLE, "agent on node n2 is unreachable")
    for error in (denied, busy):
        cluster = FakeCluster({"a:1": error, "b:1": "ok"})
        with pytest.raises(FakeError):
            cluster.finder("a:1", "b:1").call(cluster.attempt)
        assert cluster.asked == ["a:1"]


def test_no_leader_waits_with_backoff_then_names_every_master() -> None:
    cluster = FakeCluster({"a:1": standby(""), "b:1": REFUSED})
    with pytest.raises(NoLeaderError) as info:
        cluster.finder("a:1", "b:1", wait_s=3).call(cluster.attempt)
    assert sum(cluster.sleeps) == pytest.approx(3) and cluster.sleeps[:3] == [0.2, 0.4, 0.8]
    assert max(cluster.sleeps) <= 1.0
    message = str(info.value)
    assert message.startswith("no master leads (waited 3s for one): a:1: this master is a standby; no master")
    assert "b:1: cannot be reached (failed to connect" in message
    assert is_unreachable(info.value)       # `tcl submit --wait` rides it out like a restart
    assert explain_rpc_error(info.value, "a:1,b:1") == (1, "error: " + message)


def test_a_leader_elected_while_waiting_is_found() -> None:
    cluster = FakeCluster({"a:1": standby(""), "b:1": standby("")})

    def elect(seconds: float) -> None:
        FakeCluster.sleep(cluster, seconds)
        cluster.answers.update({"a:1": standby("b:1"), "b:1": "ok"})
    cluster.sleep = elect  # type: ignore[method-assign]
    assert cluster.finder("a:1", "b:1").call(cluster.attempt) == "ok from b:1"
    assert cluster.asked == ["a:1", "b:1", "a:1", "b:1"] and len(cluster.sleeps) == 1


def test_one_master_that_cannot_be_reached_fails_at_once_as_before() -> None:
    cluster = FakeCluster({})
    with pytest.raises(FakeError):
        cluster.finder("a:1").call(cluster.attempt)
    assert cluster.asked == ["a:1"] and cluster.sleeps == []


def test_a_hint_loop_ends() -> None:
    cluster = FakeCluster({"a:1": standby("b:1"), "b:1": standby("a:1")})
    with pytest.raises(NoLeaderError):
        cluster.finder("a:1", "b:1", wait_s=0).call(cluster.attempt)
    assert cluster.asked == ["a:1", "b:1"]
