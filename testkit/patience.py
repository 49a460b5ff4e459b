"""How much longer a test may wait for a daemon on this machine than on the 2-core host the
limits were set for: TCL_TEST_TIME_SCALE (default 1). The tests/vm guest sets it, since under
software emulation every Python start (each master, agent and `tcl`) takes tens of seconds.
Only upper bounds scale: a wait ends as soon as its condition holds, so a passing test is
no slower, and nothing a test measures and asserts as a figure is scaled."""

from __future__ import annotations

import os

TIME_SCALE = max(1.0, float(os.environ.get("TCL_TEST_TIME_SCALE", "1") or 1))


def patient(timeout_s: float) -> float:
    """timeout_s, stretched for a slow machine."""
    return timeout_s * TIME_SCALE
