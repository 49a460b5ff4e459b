"""Issue 35: an LM's refusal that no resend can fix ends the task FAILED with the LM's
reason (gm/refusals.py, gm/placing.py); everything else is sent again with the same id."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from tcluster.federation.gm import Pending
from tcluster.federation.messages import InternalLaunch, TaskRequest
from tcluster.gm.links import LMLink
from tcluster.gm.placing import Placer
from tcluster.gm.refusals import PermanentRefusal, permanent
from tcluster.v1 import federation_pb2


class Error:
    """What permanent() reads of a grpc.aio error."""

    def __init__(self, code: grpc.StatusCode, details: str = "env name '1BAD' is not a valid name") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("code,final", [
    (grpc.StatusCode.INVALID_ARGUMENT, True), (grpc.StatusCode.PERMISSION_DENIED, True),
    (grpc.StatusCode.OUT_OF_RANGE, True), (grpc.StatusCode.UNAVAILABLE, False),
    (grpc.StatusCode.DEADLINE_EXCEEDED, False), (grpc.StatusCode.FAILED_PRECONDITION, False),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, False), (grpc.StatusCode.INTERNAL, False),
])
def test_which_refusals_end_the_task_and_which_are_sent_again(code: grpc.StatusCode, final: bool) -> None:
    refusal = permanent("west", Error(code))         # type: ignore[arg-type]
    assert (refusal is not None) is final
    if refusal is not None:
        assert refusal.reason == f"LM west refused the task: {code.name}: env name '1BAD' is not a valid name"


class Store:
    def __init__(self) -> None:
        self.ends: list[tuple[str, str, int, str]] = []

    def ended(self, task_id: str, state: str, exit_code: int, reason: str, lm_job: str = "") -> None:
        self.ends.append((task_id, state, exit_code, reason))


class RefusingPlacer(Placer):
    def __init__(self, port: Any, error: Error) -> None:
        super().__init__(port, lambda task_id: False)
        self.error = error
        self.calls = 0

    async def rpc(self, lm: int, req: federation_pb2.PlaceRequest) -> federation_pb2.PlaceAnswer | None:
        self.calls += 1
        refusal = permanent("west", self.error)     # type: ignore[arg-type]
        if refusal is not None:
            raise refusal
        return None


def port_with(request: InternalLaunch, p: Pending) -> Any:
    in_flight = {0: (p, "a", request)}
    gm = SimpleNamespace(in_flight=in_flight, forget=lambda lm: in_flight.pop(lm, None))
    return SimpleNamespace(gm=gm, store=Store(), links=[LMLink("west", ["127.0.0.1:1"])], wake=asyncio.Event(),
                           unanswered=[])


def fixture() -> tuple[federation_pb2.PlaceRequest, Pending, InternalLaunch]:
    task = TaskRequest("f0-1.3", "a", (1000, 64))
    p = Pending(task)
    request = InternalLaunch("f0-1.3:0", 0, 5, 0, task)
    return federation_pb2.PlaceRequest(request_id=request.request_id), p, request


def test_a_permanent_refusal_ends_the_task_failed_with_the_lms_reason_and_frees_the_slot() -> None:
    pb, p, request = fixture()
    port = port_with(request, p)
    placer = RefusingPlacer(port, Error(grpc.StatusCode.INVALID_ARGUMENT))
    asyncio.run(placer._place(0, pb, p, "a"))
    assert port.store.ends == [("f0-1.3", "FAILED", 0,
                                "LM west refused the task: INVALID_ARGUMENT: env name '1BAD' is not a valid name")]
    assert port.gm.in_flight == {} and port.unanswered == [] and placer.refused == 1


def test_a_passing_refusal_is_sent_again_and_a_permanent_one_on_resend_ends_it() -> None:
    pb, p, request = fixture()
    port = port_with(request, p)
    placer = RefusingPlacer(port, Error(grpc.StatusCode.UNAVAILABLE))
    asyncio.run(placer._place(0, pb, p, "a"))
    assert port.store.ends == [] and [u[1].request_id for u in port.unanswered] == ["f0-1.3:0"]
    placer.error = Error(grpc.StatusCode.PERMISSION_DENIED, "user bob may not use queue gpu")
    asyncio.run(placer._resend_all())
    assert port.unanswered == [] and port.store.ends[0][1:3] == ("FAILED", 0)
    assert "PERMISSION_DENIED: user bob may not use queue gpu" in port.store.ends[0][3]


def test_a_refusal_reason_is_bounded() -> None:
    refusal = PermanentRefusal("west", grpc.StatusCode.INVALID_ARGUMENT, "x" * 5000)
    assert len(refusal.reason) == 1024
