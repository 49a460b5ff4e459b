"""Domain errors. Each daemon's gRPC edge maps these to status codes in one table."""

from __future__ import annotations


class TclusterError(Exception):
    """Base of every error the domain raises on purpose."""


class InvalidArgument(TclusterError):
    """Bad input: names the field, what was wrong and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class NotFound(TclusterError):
    pass


class FailedPrecondition(TclusterError):
    """The request is valid but the object's state does not allow it now."""


class Unavailable(TclusterError):
    """A dependency (an agent, the store) cannot be reached right now."""


class Unauthenticated(TclusterError):
    """No credentials, or credentials the master does not know."""


class PermissionDenied(TclusterError):
    """The caller is known but may not do this; the message says what is missing."""


class ResourceExhausted(TclusterError):
    """The caller holds as many of something as a limit allows; the message names the limit."""
