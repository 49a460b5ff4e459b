"""The agent's policy on whom a task runs as: the requested user, else the agent's
default; root only where the operator allowed it; system uids refused."""

from __future__ import annotations

import os
import pwd

from tcluster.agent.runtime.base import LaunchError


def parse_uid_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """'0-999,5000' -> ((0, 999), (5000, 5000)); '' or 'none' -> (). Raises ValueError."""
    ranges = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.lower() == "none":
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"{part[:40]!r} is not a uid or a range of uids like 0-999")
        first, last = int(low), int(high) if sep else int(low)
        if first > last:
            raise ValueError(f"{part[:40]!r}: the range is empty ({first} > {last})")
        ranges.append((first, last))
    return tuple(ranges)


def _nobody_uid() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return -1


def task_user(requested: str, default_user: str, allow_root: bool,
              deny_uids: tuple[tuple[int, int], ...] = ()) -> str:
    """The user a task runs as: its own, else the agent's default ("" = the agent's own
    user). Root only where the operator allowed it; other uids in `deny_uids` (system
    users, by default) never, whatever the master asks, except the nobody user. An unknown
    or refused user is the task's failure, with the reason."""
    user = requested or default_user
    if user:
        try:
            uid = pwd.getpwuid(int(user)).pw_uid if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise LaunchError(f"user {user!r} does not exist on this node") from None
    else:
        uid = os.geteuid()
    if uid == 0:
        if not allow_root:
            raise LaunchError(f"tasks may not run as root (user {user or 'of the agent'!r}) on this node; "
                              "the operator can allow it with `tcl-agent --allow-root`")
        return user
    if uid != _nobody_uid() and any(first <= uid <= last for first, last in deny_uids):
        refused = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in deny_uids)
        raise LaunchError(f"tasks may not run as {user or 'the agent user'!r} (uid {uid}) on this node: uids {refused} "
                          "are refused (`tcl-agent --deny-uids`)")
    return user
