"""JobService.Exec: pb <-> the relay's values (master/execs.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tcluster.domain.errors import InvalidArgument
from tcluster.master.execrelay import (
    Ended, ExecInput, ExecOpened, ExecOutput, Output, Resize, Running, Stdin, StdinEnd, check_input,
)
from tcluster.v1 import jobs_pb2


def opened_from_pb(request: jobs_pb2.ExecRequest) -> ExecOpened:
    if request.WhichOneof("kind") != "open":
        raise InvalidArgument("open", "the first message of an Exec stream must be an ExecOpen")
    o = request.open
    return ExecOpened(o.job_id, o.task_index, tuple(o.command), o.tty, o.rows, o.cols, o.term[:64])


async def inputs_from_pb(requests: AsyncIterator[jobs_pb2.ExecRequest]) -> AsyncIterator[ExecInput]:
    async for request in requests:
        kind = request.WhichOneof("kind")
        item: ExecInput
        if kind == "stdin":
            item = Stdin(request.stdin)
        elif kind == "stdin_eof":
            item = StdinEnd()
        elif kind == "resize":
            item = Resize(request.resize.rows, request.resize.cols)
        else:
            raise InvalidArgument("exec", f"a {kind or 'empty'} message after the ExecOpen")
        check_input(item)
        yield item


def output_to_pb(out: ExecOutput) -> jobs_pb2.ExecReply:
    if isinstance(out, Output):
        return jobs_pb2.ExecReply(stderr=out.data) if out.stderr else jobs_pb2.ExecReply(stdout=out.data)
    if isinstance(out, Running):
        return jobs_pb2.ExecReply(started=out.node)
    assert isinstance(out, Ended)
    ended = jobs_pb2.ExecExit(signal=out.signal, error=out.error)
    if out.exit_code is not None:
        ended.has_exit_code, ended.exit_code = True, out.exit_code
    return jobs_pb2.ExecReply(exit=ended)
