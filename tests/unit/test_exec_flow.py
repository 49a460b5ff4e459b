"""`tcl exec`'s relay: flow control both ways (the master holds at most the window of an exec's
output whatever its client does; stdin goes down only with the agent's credit), the bounds
on what a client sends, the join spec read from the shim's, and the CLI's small parsers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tcluster.agent.exectarget import parse_shim_spec, target_of
from tcluster.cli.execcmd import command_of, exit_code_of, parse_target
from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.execio import ExecPiece, FeedExec, StartExec
from tcluster.master.execrelay import (
    EXEC_WINDOW, MAX_STDIN_BYTES, ExecCap, ExecChannel, ExecOpened, Ended, Output, Resize, Running, Stdin,
    StdinEnd, check_input, check_opened, relay,
)
from tcluster.v1 import jobs_pb2


def test_the_channel_holds_at_most_its_window_and_ends_an_overrun() -> None:
    channel = ExecChannel("e1", window=3)
    for i in range(3):
        channel.deliver(ExecPiece("e1", stdout=b"x" * 10))
        assert channel.held() == i + 1
    assert channel.held_bytes() == 30
    channel.deliver(ExecPiece("e1", stdout=b"y"))        # beyond the window: the agent broke the rule
    assert channel.held() == 0
    end = asyncio.run(channel.get())
    assert end.exited and "more than the 3 exec messages" in end.error


def test_stdin_credit_alone_is_not_output() -> None:
    channel = ExecChannel("e1", window=1)

    async def scenario() -> list[bool]:
        taken = [await channel.take_stdin()]              # the window's one
        waiter = asyncio.ensure_future(channel.take_stdin())
        await asyncio.sleep(0)
        taken.append(waiter.done())                       # no credit: waits
        channel.deliver(ExecPiece("e1", stdin_credit=1))
        taken.append(await waiter)
        channel.end("gone")
        taken.append(await channel.take_stdin())          # ended: no more stdin
        return taken

    assert asyncio.run(scenario()) == [True, False, True, False]
    assert channel.held() == 0


def test_a_node_cannot_grant_stdin_credit_beyond_the_window() -> None:
    channel = ExecChannel("e1", window=2)
    channel.deliver(ExecPiece("e1", stdin_credit=1000))

    async def taken() -> list[bool]:
        got = [await channel.take_stdin(), await channel.take_stdin()]
        third = asyncio.ensure_future(channel.take_stdin())
        await asyncio.sleep(0)
        got.append(third.done())
        third.cancel()
        return got

    assert asyncio.run(taken()) == [True, True, False]


class FakeAgentLink:
    """An agent that writes as fast as its credit allows (as agent/execs.py does)."""

    def __init__(self) -> None:
        self.node = "n1"
        self.channel: ExecChannel | None = None
        self.credit = 0
        self.sent: list[object] = []
        self.stdin: list[bytes] = []

    def open_exec(self, channel: ExecChannel) -> None:
        self.channel = channel

    def close_exec(self, exec_id: str) -> None:
        self.channel = None

    def send(self, message: object) -> None:
        self.sent.append(message)
        if isinstance(message, StartExec):
            self.credit = message.window
        elif isinstance(message, FeedExec):
            self.credit += message.credit
            if message.stdin:
                self.stdin.append(message.stdin)

    def pump(self) -> None:
        """Spends all the credit it has on output."""
        while self.channel is not None and self.credit > 0:
            self.credit -= 1
            self.channel.deliver(ExecPiece("e1", stdout=b"z" * 65536))


async def _no_input() -> AsyncIterator[Stdin | StdinEnd | Resize]:
    await asyncio.Event().wait()
    yield StdinEnd()


def test_a_stalled_client_leaves_the_master_at_most_the_window() -> None:
    async def scenario() -> tuple[int, int, list[object]]:
        link, cap = FakeAgentLink(), ExecCap(4, 8)
        start = StartExec("e1", "j.0", 0, ("yes",), False, 0, 0, EXEC_WINDOW)
        out = relay(link, cap, start, _no_input())      # type: ignore[arg-type]
        first = asyncio.ensure_future(out.__anext__())
        await asyncio.sleep(0)
        link.pump()
        await first                                       # the client took one message ...
        most = 0
        for _ in range(50):                               # ... and stops reading: the agent pumps on
            link.pump()
            await asyncio.sleep(0)
            most = max(most, cap.buffered_bytes())
        await out.aclose()                                # the client leaves
        return most, link.credit, link.sent

    most, credit, sent = asyncio.run(scenario())
    assert most <= EXEC_WINDOW * 65536
    assert credit == 0
    assert isinstance(sent[-1], FeedExec) and sent[-1].cancel    # the node is told to kill the command


def test_relay_yields_output_in_order_and_ends_with_the_exit() -> None:
    async def scenario() -> list[object]:
        link, cap = FakeAgentLink(), ExecCap(4, 8)

        async def inputs() -> AsyncIterator[Stdin | StdinEnd | Resize]:
            yield Resize(24, 80)
            yield Stdin(b"hello")
            yield StdinEnd()

        out = relay(link, cap, StartExec("e1", "j.0", 0, ("cat",), True, 1, 1, 2), inputs())  # type: ignore[arg-type]
        got: list[object] = []
        assert link.channel is None
        first = asyncio.ensure_future(out.__anext__())
        await asyncio.sleep(0)
        assert link.channel is not None
        link.channel.deliver(ExecPiece("e1", started=True))
        got.append(await first)
        link.channel.deliver(ExecPiece("e1", stdout=b"hello"))
        link.channel.deliver(ExecPiece("e1", stderr=b"oops"))
        got += [await out.__anext__(), await out.__anext__()]
        link.channel.deliver(ExecPiece("e1", exited=True, exit_code=3))
        got.append(await out.__anext__())
        assert link.stdin == [b"hello"]
        assert any(isinstance(m, FeedExec) and m.rows == 24 for m in link.sent)
        assert cap.buffered_bytes() == 0
        return got

    assert asyncio.run(scenario()) == [Running("n1"), Output(b"hello"), Output(b"oops", stderr=True), Ended(3)]


def test_the_caps_refuse_one_more_per_task_and_per_user() -> None:
    cap = ExecCap(per_task=1, per_user=2)
    with cap.hold("alice", "j.0"):
        with pytest.raises(Exception, match="--execs-per-task"):
            with cap.hold("bob", "j.0"):
                pass
        with cap.hold("alice", "j.1"):
            with pytest.raises(Exception, match="--execs-per-user"):
                with cap.hold("alice", "j.2"):
                    pass
    with cap.hold("bob", "j.0"):                          # released on the way out
        pass


@pytest.mark.parametrize("opened, field", [
    (ExecOpened("j", 0, ()), "command"),
    (ExecOpened("j", 0, ("",)), "command"),
    (ExecOpened("j", 0, ("a\0b",)), "command"),
    (ExecOpened("j", 0, ("x" * 70000,)), "command"),
    (ExecOpened("j", 0, ("sh",), True, 5000, 80), "rows"),
    (ExecOpened("j", 0, ("sh",), True, 24, -1), "cols"),
])
def test_bad_opens_are_refused_naming_the_field(opened: ExecOpened, field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        check_opened(opened)


def test_input_bounds() -> None:
    check_input(Stdin(b"x" * MAX_STDIN_BYTES))
    with pytest.raises(InvalidArgument, match="stdin"):
        check_input(Stdin(b"x" * (MAX_STDIN_BYTES + 1)))
    with pytest.raises(InvalidArgument, match="resize"):
        check_input(Resize(0, 80))


def test_the_join_spec_is_the_shims() -> None:
    raw = b"".join(k + b"\0" + v + b"\0" for k, v in [
        (b"argv", b"sleep"), (b"env", b"PATH=/bin"), (b"env", b"A=b=c"), (b"procs", b"/cg/cpu/t/cgroup.procs"),
        (b"cwd", b"/work"), (b"uid", b"1000"), (b"gid", b"100"), (b"group", b"100"), (b"group", b"27"),
        (b"ns", b"1")])
    target = target_of(parse_shim_spec(raw), 4242)
    assert target == {"procs": ["/cg/cpu/t/cgroup.procs"], "groups": [100, 27], "task_pid": 4242, "ns": True,
                      "cwd": "/work", "uid": 1000, "gid": 100, "env": {"PATH": "/bin", "A": "b=c"}}


@pytest.mark.parametrize("text, parsed", [("ab12", ("ab12", 0)), ("ab12.3", ("ab12", 3))])
def test_targets(text: str, parsed: tuple[str, int]) -> None:
    assert parse_target(text) == parsed


@pytest.mark.parametrize("text", ["", ".1", "ab12.x", "ab12."])
def test_bad_targets(text: str) -> None:
    with pytest.raises(ValueError, match="JOB"):
        parse_target(text)


def test_command_and_exit_codes() -> None:
    assert command_of(["--", "ls", "-l"]) == ["ls", "-l"] and command_of(["ls"]) == ["ls"]
    assert exit_code_of(jobs_pb2.ExecExit(has_exit_code=True, exit_code=0)) == 0
    assert exit_code_of(jobs_pb2.ExecExit(has_exit_code=True, exit_code=7)) == 7
    assert exit_code_of(jobs_pb2.ExecExit(signal=9)) == 137
    assert exit_code_of(jobs_pb2.ExecExit(error="node n1 disconnected")) == 1


def test_each_attempt_of_the_stream_opens_again_and_an_older_one_stops_taking() -> None:
    from tcluster.cli.execcmd import Requests
    requests = Requests(jobs_pb2.ExecOpen(job_id="j", command=["cat"]))
    first = iter(requests)
    assert next(first).WhichOneof("kind") == "open"
    requests.put(jobs_pb2.ExecRequest(stdin=b"a"))
    assert next(first).stdin == b"a"
    second = iter(requests)                       # a standby refused: the call goes to the leader
    assert next(second).WhichOneof("kind") == "open"
    requests.put(jobs_pb2.ExecRequest(stdin_eof=True))
    assert list(first) == []                      # the old attempt takes nothing more
    assert next(second).stdin_eof
    requests.close()
    assert list(second) == []
