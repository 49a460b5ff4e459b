"""`tcl submit --export`, with Slurm's meaning: which of the submitting shell's variables a
task gets. ALL (the default) is every variable except the deny-list below; NONE is none;
`VAR[,VAR=value...]` only those (a bare name takes the shell's value), and `ALL,VAR=value`
every variable with these set. Exported values go with `--env`'s into the job's
environment: the owner's secrets, redacted for everyone else. `--env` wins over them, and
the variables the node sets for the task (TCL_JOB_ID, CUDA_VISIBLE_DEVICES, ...) over both.

Pure: the environment is an argument."""

from __future__ import annotations

import re
from typing import Mapping

from tcluster.domain.errors import InvalidArgument

FLAG = "--export"
ALL, NONE = "ALL", "NONE"
# What belongs to the submitting session, the node or tcl itself, never to a task on
# another machine: credentials and agents, the display, the login session, the shell's own
# bookkeeping, the identity the node gives the task's user, and what the agent sets.
DENIED = frozenset({
    "TCL_TOKEN", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY",
    "GPG_AGENT_INFO", "KRB5CCNAME", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_SEAT", "XDG_VTNR", "XDG_SEAT_PATH",
    "TMUX", "TMUX_PANE", "STY", "WINDOW", "TERM_SESSION_ID",
    "PWD", "OLDPWD", "SHLVL", "_", "HOME", "USER", "LOGNAME", "HOSTNAME", "MAIL",
    "INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
    "TCL_JOB_ID", "TCL_TASK_INDEX", "TCL_TASK_COUNT", "TCL_ATTEMPT", "TCL_ARRAY_TASK_ID",
    "TCL_PREEMPTED", "TCL_PREEMPTIONS", "TCL_GPUS", "CUDA_VISIBLE_DEVICES",
})
DENIED_PREFIXES = ("XDG_SESSION_", "SSH_")
MAX_EXPORT_BYTES = 128 * 1024       # all exported names and values together
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def denied(name: str) -> bool:
    return name in DENIED or name.startswith(DENIED_PREFIXES)


def exported_env(spec: str | None, environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Sorted (name, value) pairs to add under the job's own env; InvalidArgument on bad input."""
    items = [item.strip() for item in (spec if spec is not None else ALL).split(",")]
    if any(not item for item in items):
        raise InvalidArgument(FLAG, f"{(spec or '')[:40]!r} has an empty item; use ALL, NONE or VAR[,VAR=value...]")
    head = items[0].upper() if items[0].upper() in (ALL, NONE) else ""    # "": only the variables listed
    if head:
        items = items[1:]
    out = {name: value for name, value in environ.items() if _NAME.match(name) and not denied(name)} \
        if head == ALL else {}
    for item in items:
        name, sep, value = item.partition("=")
        if not _NAME.match(name):
            raise InvalidArgument(FLAG, f"{name[:40]!r} is not a variable name; use ALL, NONE or "
                                        "VAR[,VAR=value...] with names of [A-Za-z_][A-Za-z0-9_]*")
        if sep:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    check_size(out)
    return tuple(sorted(out.items()))


def check_size(env: Mapping[str, str]) -> None:
    sizes = {name: len(name.encode()) + len(value.encode("utf-8", "surrogateescape")) + 2
             for name, value in env.items()}
    total = sum(sizes.values())
    if total <= MAX_EXPORT_BYTES:
        return
    largest = sorted(sizes, key=lambda name: -sizes[name])[:3]
    named = ", ".join(f"{name} ({sizes[name]} bytes)" for name in largest)
    raise InvalidArgument(FLAG, f"the exported environment is {total} bytes, more than {MAX_EXPORT_BYTES} allowed; "
                                f"the largest: {named}; unset them, or choose with --export VAR,... or --export NONE")
