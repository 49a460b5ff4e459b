"""Run a bench script at an older revision and now, alternately, in one run (the machine is
shared and noisy: interleaving lets the noise hit both alike).

The old revision is unpacked from `git archive` into a scratch directory, and its import
package assembled there as `setuptools`' package-dir mapping does (tcluster.master ->
master/, ...) with symlinks, so `import tcluster` there loads the old code only. Each run
is a fresh process: the old script under the old package, then the new under the new.

    .venv/bin/python bench/at_revision.py [--rev main] [--times 2] [--script-now] -- bench/heartbeat_path.py --nodes 10000
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.quick import parse_args as parse_quick  # noqa: E402


def unpack(rev: str, into: Path) -> str:
    """The tree of `rev` in `into`, importable as `tcluster`; returns the short hash."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    mapping = tomllib.loads((into / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, where in sorted(mapping.items(), key=lambda kv: kv[0].count(".")):
        parts = package.split(".")
        if len(parts) == 1:
            continue
        link = into.joinpath("tcluster", *parts[1:])
        if not link.exists():
            link.symlink_to(into / where, target_is_directory=True)
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True, capture_output=True,
                          text=True).stdout.strip()


def check_old_package(old: Path, env: dict[str, str]) -> None:
    """The old runs must load the old code, a master started with `-m` included: else
    "then" and "now" would measure the same tree (as cluster_scale's did until its old side
    ran with PYTHONSAFEPATH)."""
    probe = ("import importlib\nfor name in ('tcluster.master', 'testkit'):\n    try:\n"
             "        print(importlib.import_module(name).__file__)\n    except ImportError as e:\n"
             "        print('missing', name, e)")
    lines = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    found = [line for line in lines if not line.startswith("missing ")]
    if not found or not lines[0].endswith(".py"):      # tcluster.master itself must load, from a file
        raise SystemExit(f"at_revision: the old tree's package does not load: {lines}")
    strays = [f for f in found if not Path(f).resolve().is_relative_to(old.resolve())]
    if strays:
        raise SystemExit(f"at_revision: the old tree's run loads {strays} (not under {old})")


def run(label: str, argv: list[str], env: dict[str, str] | None) -> int:
    print(f"=== {label}: {' '.join(argv[1:])}  (load average {os.getloadavg()[0]:.2f})", flush=True)
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    print(done.stdout.rstrip(), flush=True)
    if done.returncode:
        print(done.stderr.rstrip(), flush=True)
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default="main")
    parser.add_argument("--times", type=int, default=2, help="runs of each, alternating")
    parser.add_argument("--script-now", action="store_true", help="today's script on the old package too")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS]: a path under the repository")
    args = parse_quick(parser, {"times": 1})
    script = [a for a in args.script if a != "--"]
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch)
        short = unpack(args.rev, old)
        # PYTHONSAFEPATH: a bench that starts `python -m testkit...` (cluster_scale's master)
        # would otherwise find the working directory's package first, whatever PYTHONPATH says.
        env = {**os.environ, "PYTHONPATH": str(old), "PYTHONSAFEPATH": "1"}
        check_old_package(old, env)
        if args.script_now or not (old / script[0]).exists():   # a bench newer than the revision
            shutil.copy(ROOT / script[0], old / script[0])
            print(f"(today's {script[0]} runs on the old package too)")
        failed = 0
        for _ in range(args.times):
            failed += run(f"then ({args.rev} = {short})", [sys.executable, str(old / script[0]), *script[1:]], env) != 0
            failed += run("now (this tree)", [sys.executable, str(ROOT / script[0]), *script[1:]], None) != 0
    return 1 if failed else 0      # every run's output is printed, a failed one's error too


if __name__ == "__main__":
    sys.exit(main())
