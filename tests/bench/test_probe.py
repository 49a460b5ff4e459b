"""testkit/loadgen/probe.py (cluster_scale's timers inside tcl-master) fails loudly when
what it wraps moved, rather than time nothing: a missing target, or a function that no
longer calls it there, stops it at start."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from testkit.loadgen.probe import ProbeTargetMissing, wrap

ROOT = Path(__file__).resolve().parents[2]


def make_module() -> types.ModuleType:
    module = types.ModuleType("fake_rounds")
    exec("def schedule_round(x):\n    return x + 1\n\n"
         "def schedule_once(x):\n    return schedule_round(x)\n\n"
         "def elsewhere(x):\n    return x\n", vars(module))
    return module


def test_wraps_where_the_caller_looks_it_up() -> None:
    module = make_module()
    seen = []

    def timed(fn):  # type: ignore[no-untyped-def]
        def inner(x):  # type: ignore[no-untyped-def]
            seen.append(x)
            return fn(x)
        return inner

    wrap(module, "schedule_round", timed, used_by=module.schedule_once)
    assert module.schedule_once(1) == 2 and seen == [1]


def test_a_missing_target_fails_at_start() -> None:
    with pytest.raises(ProbeTargetMissing, match="fake_rounds.gone is gone"):
        wrap(make_module(), "gone", lambda fn: fn)


def test_a_caller_that_no_longer_calls_it_fails_at_start() -> None:
    module = make_module()
    with pytest.raises(ProbeTargetMissing, match="elsewhere no longer calls fake_rounds.schedule_round"):
        wrap(module, "schedule_round", lambda fn: fn, used_by=module.elsewhere)
    other = make_module()     # the same name, called from another module's globals
    with pytest.raises(ProbeTargetMissing):
        wrap(module, "schedule_round", lambda fn: fn, used_by=other.schedule_once)


def test_installs_on_todays_master() -> None:
    """Every target the probe wraps is where it looks (a fresh interpreter: install()
    patches the master's modules for good)."""
    code = ("from testkit.loadgen.probe import install; install()\n"
            "from tcluster.master import rounds\n"
            "assert rounds.schedule_round.__qualname__.startswith('install.'), rounds.schedule_round\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
