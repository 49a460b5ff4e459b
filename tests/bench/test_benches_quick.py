"""Every bench/ script once at toy size (`--quick`, bench/quick.py), as the README runs it:
`python bench/NAME.py`, a subprocess in a session of its own. It must exit 0 and print its
figures line (its table row or ratio), and leave no process of its session running (masters,
agents, etcd members, dockerd: each bench stops what it started). A function a bench calls
or the load probe wraps that moved breaks the suite the day it moves, not the next time
someone wants the README's figures. No wall-clock assertion: what a figure says at toy size
is nobody's business. A bench is skipped only when what it needs is truly absent here (its
cgroup backend, etcd, an older revision in a shallow clone); CI has them (.ci/run).

Costs 5.5 to 7 minutes on 2 cores at load 11-15 (another suite running beside it), 4 of them in
the benches that start daemons (cluster_scale, cli_startup, failover, submit_latency,
agent_overhead, start_latency: marked e2e or system); the in-process ones take seconds each."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TIMEOUT_S = 400.0          # each; toy runs take seconds, a loaded 2-core machine stretches them
# Importable helpers of the benches, not benches: nothing of theirs to run at toy size.
LIBRARIES = {"__init__.py", "quick.py", "workloads.py", "dockerd.py"}


def cgroups() -> str | None:
    from testkit.cgroups import SKIP_REASON
    return SKIP_REASON or None


def etcd() -> str | None:
    from testkit.etcd_cluster import etcd_skip_reason
    return etcd_skip_reason()


def revision(rev: str) -> Callable[[], str | None]:
    def why() -> str | None:
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True)
        return None if found.returncode == 0 else f"revision {rev} is not in this clone (shallow?)"
    return why


def nothing() -> str | None:
    return None


@dataclass(frozen=True)
class Bench:
    script: str                                    # bench/<script>.py
    figures: str                                   # a line of its output must match (re.M)
    args: tuple[str, ...] = ()
    needs: Callable[[], str | None] = nothing      # why it cannot run here; None: it can
    marks: tuple[pytest.MarkDecorator, ...] = field(default=())
    quick: bool = True                             # etcd_local's demo takes no flags

    @property
    def id(self) -> str:
        return "-".join((self.script, *self.args[:1])) if self.script == "compare_revisions" else self.script


DAEMONS = (pytest.mark.e2e,)               # starts the real binaries (tcl-master, tcl-agent)
HOST = (pytest.mark.e2e, pytest.mark.system)   # and runs tasks in this host's cgroups
BENCHES = [
    Bench("agent_overhead", r"^goal: < 80 MB and < 2% of a core with 3 tasks: (met|NOT met)$", needs=cgroups,
          marks=HOST),
    Bench("at_revision", r"(?s)^=== then \(HEAD = \w+\).*^tick, none due: .*^=== now \(this tree\).*^tick, none due: ",
          args=("--rev", "HEAD", "--", "bench/tick_starting.py", "--quick")),
    Bench("batch_array", r"^    array / ordinary: best [\d.]+x, median [\d.]+x"),
    Bench("cli_startup", r"^tcl status ID -o json +[\d.]+ .* [\d.]+x$", needs=revision("a8f7959"), marks=DAEMONS),
    Bench("cluster_scale", r"^PENDING jobs waiting +\d+ +\d+ +[\d.]+x", marks=DAEMONS),
    Bench("compare_revisions", r"^ +mch/anbf +[\d.]+ +[\d.]+ +[\d,]+ +[\d,]+ +[\d.]+x +yes$", args=("round",),
          needs=revision("e307186")),
    Bench("compare_revisions", r"^ +2 +100( +[\d.]+){3}( +[\d.]+x){3} +yes$", args=("mch",), needs=revision("e307186")),
    Bench("container_overhead", r"^\| memory-bound \(2 x 16 MiB fill\)( \| [\d.]+){3} \|$", needs=cgroups,
          marks=(pytest.mark.system,)),
    Bench("dependency_chain", r"^ +40 +[\d.]+s +40 +1\.0$"),
    Bench("dashboard", r"^heartbeat handling, the service alone .* -> [\d.]+x on the heartbeat path"),
    Bench("etcd_local", r"^etcd://127\.0\.0\.1:\d+,", needs=etcd, quick=False),
    Bench("failover", r"^submit ack +p50 +[\d.]+ s", needs=etcd, marks=DAEMONS),
    Bench("fairness", r"^ +2 +100 +\d+ +[\d./]+( +[\d.]+){3} +\d+x +[\d.]+x +\d+$"),
    Bench("fair_users", r"^ratio users\+decay / today: [\d.]+ \(target <= 1.5\)$"),
    Bench("federation_sim", r"^engines agree: yes$"),
    Bench("fed_lm_place", r"^Place / Submit, p50: [\d.]+x$"),
    Bench("gm_place", r"^one slow LM +[\d.]+ +[\d.]+ +[\d.]+x$"),
    Bench("heartbeat_path", r"^ +total +[\d.]+ +-> [\d,]+ heartbeats/s per core"),
    Bench("quotas_sim", r"^quotas +utilization [\d.]+  tasks done \d+$"),
    Bench("ledger_report", r"^tcl report --by user over [\d,]+ rows, end to end: [\d.]+ s", marks=DAEMONS),
    Bench("megha", r"^\| K7c heartbeat 30 s, \d+ workers \| \d+/\d+ \|"),
    Bench("mch_floor", r"^ +3 +100 +\d+ +\d+( +[\d.]+){4} +\d+%$"),
    Bench("packing", r"^ +lotes +[\d.]+ +[\d.]+%"),
    Bench("placement", r"^ +100 +anbf +[\d,]+ +[\d,]+ +[\d,]+ +\d+x +\d+% +yes$"),
    Bench("preemption", r"^exempt2 +\d+ +[\d.]+ +[\d.]+"),
    Bench("start_latency", r"^goal: p50 launch->running <= 10 ms: (met|NOT met)$", needs=cgroups, marks=HOST),
    Bench("store_commit", r"^  all phases: wall [\d.]+ s$"),
    Bench("submit_latency", r"^process +[\d.]+ +[\d.]+", marks=DAEMONS),
    Bench("tick_starting", r"^tick, none due: [\d,]+ us; tick, 5 due: [\d,]+ us$"),
]


def session_of(sid: int) -> list[tuple[int, str]]:
    """The live processes of session `sid`: (pid, command line)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()     # state, ppid, pgrp, session, ...
            if int(fields[3]) != sid or fields[0] == "Z":
                continue
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(entry.name), cmd.strip()))
    return found


def leftovers(sid: int, grace_s: float = 15.0) -> list[tuple[int, str]]:
    """What of the bench's session still runs after `grace_s` (a child may take a moment to
    see its parent gone); those are then killed, each by its pid."""
    deadline = time.monotonic() + grace_s
    while (left := session_of(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def run_bench(bench: Bench) -> tuple[int | None, str, list[tuple[int, str]]]:
    """(exit status, or None past the timeout; stdout and stderr together; what of its
    session was still running afterwards)."""
    argv = [sys.executable, str(BENCH / f"{bench.script}.py"), *(("--quick",) if bench.quick else ()), *bench.args]
    child = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    code: int | None = None
    try:
        out, _ = child.communicate(timeout=TIMEOUT_S)
        code = child.returncode
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGTERM)     # benches that start daemons stop them on SIGTERM
        try:
            out, _ = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
    return code, out, leftovers(child.pid)   # it led its own session: what it left is in there


@pytest.mark.parametrize("bench", [pytest.param(b, marks=b.marks, id=b.id) for b in BENCHES])
def test_bench_runs_at_toy_size(bench: Bench) -> None:
    why = bench.needs()
    if why:
        pytest.skip(why)
    code, out, left = run_bench(bench)
    tail = out[-4000:]
    assert code is not None, f"bench/{bench.script}.py --quick ran past {TIMEOUT_S:.0f} s:\n{tail}"
    assert code == 0, f"bench/{bench.script}.py --quick exited {code}:\n{tail}"
    assert re.search(bench.figures, out, re.M), f"no line matching {bench.figures!r} in its output:\n{tail}"
    assert not left, f"bench/{bench.script}.py left these running (now killed): {left}"


def test_every_bench_is_run_here() -> None:
    """A new bench gets a --quick and a row in BENCHES, or this fails."""
    scripts = {p.stem for p in BENCH.glob("*.py") if p.name not in LIBRARIES}
    assert scripts == {b.script for b in BENCHES}


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.sh")))
def test_device_script_parses(script: str) -> None:
    """The .sh scripts run on a lent device machine (a GPU, 16 quiet cores): here only
    bash's syntax check."""
    done = subprocess.run(["bash", "-n", str(BENCH / script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
