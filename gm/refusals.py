"""Issue 35: an LM's refusal of a Place that no resend can fix. A Place that got no answer
is sent again with the same request id (gm/placing.py); but an LM master that refuses the
request itself (the spec is invalid there, the caller may not run it) would refuse every
copy the same way: the task ends FAILED with the LM's reason instead of being resent for
ever while its job shows PLACING with no error."""

from __future__ import annotations

import grpc

# The codes that describe the request, not the moment: the same bytes get the same answer.
# UNAVAILABLE, DEADLINE_EXCEEDED, FAILED_PRECONDITION (a standby naming its leader),
# RESOURCE_EXHAUSTED and the rest stay retryable.
PERMANENT_CODES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
                             grpc.StatusCode.OUT_OF_RANGE})


class PermanentRefusal(Exception):
    """An LM refused a Place for a reason that a resend cannot change."""

    def __init__(self, lm_name: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"LM {lm_name} refused the task: {code.name}: {details}")
        self.code = code
        self.reason = str(self)[:1024]


def permanent(lm_name: str, error: grpc.aio.AioRpcError) -> PermanentRefusal | None:
    """The refusal to end the task with; None when sending again may succeed."""
    if error.code() not in PERMANENT_CODES:
        return None
    return PermanentRefusal(lm_name, error.code(), error.details() or "")
