"""testkit's waiting loops poll on when one call outlives its own deadline (a master slow
under emulation beside a CPU hog: a guest run's figure 4 failed so), and fail on anything
else at once."""

from __future__ import annotations

import subprocess
from unittest import mock

import grpc
import pytest

import testkit.inproc
from testkit.faultcluster import wait_for
from testkit.procs import SLOW_ANSWER, polled_status


class Rpc(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "Deadline Exceeded"


def test_wait_for_polls_on_after_a_deadline_exceeded() -> None:
    replies = iter([Rpc(grpc.StatusCode.DEADLINE_EXCEEDED), None, {"state": "RUNNING"}])

    def check() -> object:
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply
    assert wait_for(check, 5, "running", interval_s=0.001) == {"state": "RUNNING"}


def test_wait_for_fails_at_once_on_another_error_and_names_a_slow_master_at_its_deadline() -> None:
    def unavailable() -> object:
        raise Rpc(grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(grpc.RpcError):
        wait_for(unavailable, 5, "anything", interval_s=0.001)

    def slow() -> object:
        raise Rpc(grpc.StatusCode.DEADLINE_EXCEEDED)
    with mock.patch("testkit.faultcluster.patient", lambda s: s), pytest.raises(AssertionError, match="slow one"):
        wait_for(slow, 0.01, "slow one", interval_s=0.001)


def test_the_slow_answer_is_the_clis_own_words() -> None:
    from tcluster.cli.client import explain_rpc_error
    assert SLOW_ANSWER in explain_rpc_error(Rpc(grpc.StatusCode.DEADLINE_EXCEEDED), "127.0.0.1:1")[1]


def _tcl(code: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["tcl"], code, stdout, stderr)


def test_polled_status_is_none_for_a_late_answer_and_fails_on_any_other_error() -> None:
    late = _tcl(1, stderr=f"error: the master at 127.0.0.1:1 {SLOW_ANSWER} 10s\n")
    with mock.patch.object(testkit.inproc, "tcl_in_process", return_value=late):
        assert polled_status("127.0.0.1:1", "j1") is None
    with mock.patch.object(testkit.inproc, "tcl_in_process", return_value=_tcl(0, '{"state": "DONE"}')):
        assert polled_status("127.0.0.1:1", "j1") == {"state": "DONE"}
    unknown = _tcl(1, stderr="error: job j1 not found\n")
    with mock.patch.object(testkit.inproc, "tcl_in_process", return_value=unknown), \
            pytest.raises(AssertionError, match="not found"):
        polled_status("127.0.0.1:1", "j1")
