"""`tcl doctor`'s options: plain values only, so that building the parser loads nothing
(the checks live in cli/doctor.py and agent/preflight.py, imported when the command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_doctor(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check this node for the agent: cgroups, kernel, shim, master",
                       description="Checks what tcl-agent needs on this node: cgroup version, controllers and "
                       "delegation, the namespaces and pidfds the task supervisor uses, the supervisor itself, "
                       "root, the master's ports and the clock skew against it. Each line is OK, SKIP (cannot be "
                       "checked here) or FAIL with the fix; exit 1 if any FAIL.")
    p.add_argument("--config", metavar="FILE", type=Path,
                   help="the agent's config file (e.g. /etc/tcluster/agent.toml): its state_dir and master")
    p.add_argument("--state-dir", metavar="DIR", type=Path,
                   help="the agent's state dir, for its join (default: the config's, else /var/lib/tcluster/agent)")
