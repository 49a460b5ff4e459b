"""A job script (`tcl submit run.sh`): its text travels with the job, bounded, and the node
runs it by its interpreter (the `#!` line; /bin/sh without one) from a copy the task
supervisor hands the task as a file descriptor, so no node needs to see the file itself."""

from __future__ import annotations

from tcluster.domain.bounds import quote
from tcluster.domain.errors import InvalidArgument

MAX_SCRIPT_BYTES = 512 * 1024      # half the spec's bound: room for the environment beside it
DEFAULT_INTERPRETER = "/bin/sh"
# The descriptor the supervisor puts the script on (agent/shim.c): high, so that no program
# expects it, and below 64 so that the first select()-era fd_set still holds it. The path is
# /proc's: the task's own /proc is mounted in its PID namespace, /dev/fd may be missing.
SCRIPT_FD = 63
SCRIPT_PATH = f"/proc/self/fd/{SCRIPT_FD}"


def check_script(script: str) -> None:
    size = len(script.encode("utf-8", "surrogatepass"))
    if size > MAX_SCRIPT_BYTES:
        raise InvalidArgument("script", f"is {size} bytes; at most {MAX_SCRIPT_BYTES} ({MAX_SCRIPT_BYTES // 1024} KiB) "
                                        "allowed: keep data in files the script reads")
    if "\x00" in script:
        raise InvalidArgument("script", "contains a NUL byte: a script is text")
    interpreter(script)


def interpreter(script: str) -> tuple[str, ...]:
    """The `#!` line as the kernel reads it: the interpreter, then at most one argument (the
    rest of the line, spaces included); /bin/sh without one."""
    first = script.split("\n", 1)[0]
    if not first.startswith("#!"):
        return (DEFAULT_INTERPRETER,)
    words = first[2:].strip().split(None, 1)
    if not words or not words[0].startswith("/"):
        raise InvalidArgument("script", f"the #! line {quote(first)} must name an absolute interpreter, "
                                        "e.g. #!/bin/bash or #!/usr/bin/env python3")
    return tuple(words)


def script_argv(script: str, command: tuple[str, ...]) -> tuple[str, ...]:
    """What the node executes: the interpreter on the script's descriptor, then the script's
    arguments (the command's words after the script's name)."""
    return (*interpreter(script), SCRIPT_PATH, *command[1:])
