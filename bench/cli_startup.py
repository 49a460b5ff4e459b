"""How long `tcl` takes to start and answer, at an older revision and now, side by side in
one run (issue 19: `tcl --help` <= 100 ms, `tcl status ID` <= 150 ms of wall time).

One tcl-master of this tree listens on 127.0.0.1 port 0 in a scratch directory, without
TLS, and holds one submitted job (pending: there is no agent). Then each command runs
--rounds times under both revisions, alternately (the machine is shared and noisy:
interleaving lets the noise hit both alike), each a fresh interpreter started the way the
`tcl` console script starts it. The old revision is unpacked as bench/at_revision.py does.
Two floors neither revision can go under: python itself (`-c pass`, this venv's site
included), and for the commands that call the master, importing grpc and the jobs stubs.

Bytecode is cached (in the scratch directory, PYTHONPYCACHEPREFIX) and one unmeasured
round fills it, as an installed package has its .pyc files; --no-bytecode-cache compiles
every module on every start instead, as under PYTHONDONTWRITEBYTECODE=1.

    .venv/bin/python bench/cli_startup.py [--rev a8f7959] [--rounds 30] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.at_revision import unpack  # noqa: E402

# What the console script `tcl` runs (pyproject.toml's [project.scripts]).
TCL = "import sys; from tcluster.cli.main import main; sys.exit(main())"
FLOORS = {"python -c pass": ["-c", "pass"],
          "import grpc + stubs": ["-c", "import grpc; from tcluster.v1 import jobs_pb2_grpc"]}
MASTER_UP_S = 60.0


@dataclass(frozen=True)
class Row:
    """One line of the table: (wall, CPU) milliseconds of each run, then and now."""

    label: str
    then: list[tuple[float, float]]
    now: list[tuple[float, float]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, user+system CPU) ms of one run: wall is what a user waits, CPU what other load
    on the machine disturbs less. A failing command would time its error path: that stops
    the bench. It runs in the scratch directory, since `python -c` puts the working
    directory first on sys.path and this tree's root holds a `tcluster/` that would shadow
    the old revision's."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.perf_counter() - start) * 1000
    if code := os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{argv[2:]} exited {code}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def start_master(scratch: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """This tree's tcl-master on a free port; returns it and its address."""
    log = scratch / "master.log"
    master = subprocess.Popen([str(Path(sys.executable).with_name("tcl-master")), "--listen", "127.0.0.1:0",
                               "--data-dir", str(scratch / "master"), "--http", "off"],
                              env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    deadline = time.monotonic() + MASTER_UP_S
    while time.monotonic() < deadline and master.poll() is None:
        if found := re.search(r"listening on (127\.0\.0\.1:\d+)", log.read_text(errors="replace")):
            return master, found.group(1)
        time.sleep(0.05)
    master.kill()
    raise SystemExit(f"tcl-master did not start:\n{log.read_text(errors='replace')[-2000:]}")


def submit_one(env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", TCL, "submit", "--cpu", "0.1", "--mem", "16Mi", "--", "true"],
                          env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def measure(old: Path, env: dict[str, str], commands: dict[str, list[str]], rounds: int, warm: int = 1) -> list[Row]:
    then_env = {**env, "PYTHONPATH": str(old)}   # the unpacked tree shadows this one's package
    runs = {**FLOORS, **{label: ["-c", TCL, *args] for label, args in commands.items()}}
    rows = {label: Row(label, [], []) for label in runs}
    for done in range(-warm, rounds):   # rounds below 0 only warm the bytecode and page caches
        for label, row in rows.items():
            then = timed([sys.executable, *runs[label]], then_env, old.parent)
            now = timed([sys.executable, *runs[label]], env, old.parent)
            if done >= 0:
                row.then.append(then)
                row.now.append(now)
        print(f"\rround {done + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return list(rows.values())


def print_table(rows: list[Row], rev: str, short: str, args: argparse.Namespace) -> None:
    bytecode = "compiled on every start" if args.no_bytecode_cache else "bytecode cached"
    print(f"`tcl` in ms, {args.rounds} interleaved runs each; then = {rev} ({short}), now = this tree; {bytecode}; "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    print(f"{'':22} {'wall':-^44}  {'CPU (user+sys)':-^27}")
    print(f"{'command':22} {'then p50':>8} {'then p90':>8} {'now p50':>8} {'now p90':>8} {'now/then':>8}  "
          f"{'then p50':>8} {'now p50':>8} {'ratio':>7}")
    for row in rows:
        wall_then, wall_now = [w for w, _ in row.then], [w for w, _ in row.now]
        cpu_then, cpu_now = statistics.median(c for _, c in row.then), statistics.median(c for _, c in row.now)
        then50, now50 = statistics.median(wall_then), statistics.median(wall_now)
        print(f"{row.label:22} {then50:8.1f} {percentile(wall_then, 90):8.1f} {now50:8.1f} "
              f"{percentile(wall_now, 90):8.1f} {now50 / then50:7.2f}x  {cpu_then:8.1f} {cpu_now:8.1f} "
              f"{cpu_now / cpu_then:6.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default="a8f7959", help="the older revision (default: the last before the lazy CLI)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile every module on every start")
    parser.add_argument("--warm-rounds", type=int, default=1, help="unmeasured rounds first (caches)")
    parser.add_argument("--commands", default="", help="comma list of the commands' labels (default: all)")
    args = parse_quick(parser, {"rounds": 1, "warm_rounds": 0, "commands": "tcl --help,tcl status ID -o json"})
    with tempfile.TemporaryDirectory(prefix="tcl-cli-bench-") as scratch:
        old = Path(scratch) / "then"
        old.mkdir()
        short = unpack(args.rev, old)
        # No stored login and no token: the master runs without TLS on the loopback.
        env = {**os.environ, "XDG_CONFIG_HOME": str(Path(scratch) / "config")}
        for key in ("TCL_TOKEN", "TCL_CA", "TCL_WAIT_LEADER_S", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
            env.pop(key, None)
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:   # .pyc files for both trees, kept out of them
            env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        master, address = start_master(Path(scratch), env)
        try:
            env["TCL_MASTER"] = address
            job_id = submit_one(env, Path(scratch))
            commands = {"tcl --help": ["--help"], "tcl status ID": ["status", job_id], "tcl jobs": ["jobs"],
                        "tcl status ID -o json": ["status", job_id, "-o", "json"]}
            if args.commands:
                commands = {label: commands[label] for label in args.commands.split(",")}
            rows = measure(old, env, commands, args.rounds, args.warm_rounds)
        finally:
            master.terminate()
            master.wait(timeout=30)
    print_table(rows, args.rev, short, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
