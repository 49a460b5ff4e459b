"""Log flow control, pure parts: the master's bounded LogStream and per-user StreamCap,
the agent's two-lane SendQueue and per-request Credit (review finding 1)."""

from __future__ import annotations

import asyncio

import pytest

from tcluster.agent.sendqueue import Credit, LogSends, SendQueue
from tcluster.domain.errors import ResourceExhausted
from tcluster.master.core.actions import LogPiece
from tcluster.master.links import LogStream
from tcluster.v1 import agent_pb2


def piece(data: bytes = b"x", eof: bool = False) -> LogPiece:
    return LogPiece("r1", data, eof)


@pytest.mark.parametrize(("delivered", "window", "taken", "held", "ended_with"), [
    (3, 4, 0, 3, None),                     # within the window: all held
    (4, 4, 0, 4, None),                     # exactly the window
    (5, 4, 0, 0, "more than the 4"),        # one over: the agent broke the window; dropped, ended
    (6, 4, 2, 4, None),                     # taken pieces make room (credit went back)
])
def test_log_stream_holds_at_most_its_window(delivered: int, window: int, taken: int, held: int,
                                             ended_with: str | None) -> None:
    async def body() -> None:
        stream = LogStream("r1", window)
        for i in range(delivered):
            if i == window and taken:
                for _ in range(taken):
                    await stream.get()
            stream.deliver(piece())
        assert stream.held() == held
        if ended_with:
            last = await stream.get()
            assert last.eof and ended_with in last.error
    asyncio.run(body())


def test_a_disconnect_ends_the_stream_after_what_it_holds() -> None:
    async def body() -> None:
        stream = LogStream("r1", 4)
        stream.deliver(piece(b"a"))
        stream.end("node n1 disconnected")
        stream.deliver(piece(b"late"))                 # after the end: dropped
        assert (await stream.get()).data == b"a"
        last = await stream.get()
        assert last.eof and last.error == "node n1 disconnected"
    asyncio.run(body())


@pytest.mark.parametrize(("cap", "opens", "refused_at"), [(1, 2, 1), (3, 3, None), (3, 5, 3), (8, 9, 8)])
def test_stream_cap_refuses_one_over_and_names_the_cap(cap: int, opens: int, refused_at: int | None) -> None:
    from contextlib import ExitStack
    from tcluster.master.logstream import StreamCap
    follows = StreamCap(cap)
    with ExitStack() as held:
        for i in range(opens):
            if i == refused_at:
                with pytest.raises(ResourceExhausted, match=f"has {cap} log streams open.*--log-streams-per-user"):
                    held.enter_context(follows.hold("alice"))
                break
            held.enter_context(follows.hold("alice"))
        held.enter_context(follows.hold("bob"))        # another user's count is their own
    assert follows.open("alice") == follows.open("bob") == 0   # all released


def test_send_queue_sends_control_before_log_data_and_bounds_log_data() -> None:
    def msg(kind: str) -> agent_pb2.AgentMessage:
        if kind == "hb":
            return agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
        return agent_pb2.AgentMessage(log_data=agent_pb2.LogData(request_id=kind))

    async def body() -> None:
        out = SendQueue(log_slots=2)
        await out.put_log(msg("l1"))
        await out.put_log(msg("l2"))
        third = asyncio.create_task(out.put_log(msg("l3")))
        await asyncio.sleep(0)
        assert not third.done()                         # no room: the sender waits
        out.put_control(msg("hb"))
        order = [(await out.get()).WhichOneof("kind")]
        await asyncio.sleep(0)
        assert not third.done()                         # a heartbeat frees no log slot
        order.append((await out.get()).log_data.request_id)
        await third
        order += [(await out.get()).log_data.request_id for _ in range(2)]
        assert order == ["heartbeat", "l1", "l2", "l3"]
    asyncio.run(body())


@pytest.mark.parametrize(("window", "grants", "takes_done"), [(2, 0, 2), (2, 3, 5), (0, 0, 6)])
def test_credit_lets_window_plus_grants_through(window: int, grants: int, takes_done: int) -> None:
    async def body() -> None:
        credit = Credit(window)
        credit.grant(grants)
        done = 0
        for _ in range(6):
            try:
                await asyncio.wait_for(credit.take(), 0.05)
            except asyncio.TimeoutError:
                break
            done += 1
        assert done == takes_done
    asyncio.run(body())


def test_log_sends_cancel_and_credit_by_request() -> None:
    async def body() -> None:
        sends = LogSends()
        sent: list[str] = []

        async def sender(credit: Credit) -> None:
            for i in range(3):
                await credit.take()
                sent.append(str(i))
            await asyncio.Event().wait()

        sends.start("r1", 1, sender)
        await asyncio.sleep(0.01)
        assert sent == ["0"]
        sends.credit("r1", 1, cancel=False)
        sends.credit("unknown", 5, cancel=True)        # ignored
        await asyncio.sleep(0.01)
        assert sent == ["0", "1"]
        sends.credit("r1", 0, cancel=True)
        await asyncio.sleep(0.01)
        assert len(sends) == 0
    asyncio.run(body())
