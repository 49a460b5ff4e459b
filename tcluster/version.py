"""`--version` of tcl and of every daemon: the package version and the git commit it was built from.

The commit comes from, in this order:
- the git checkout the package is imported from (an editable install, `make dev`): asked live,
  so that it follows every commit; `+dirty` when tracked files differ from it;
- tcluster/COMMIT, stamped at build time (setup.py for a wheel built from a checkout,
  packaging/build_deb.py for the .deb, whose wheel is built from a copy without .git);
- else "unknown".

Standard library only: setup.py and packaging/build_deb.py load this file by path to stamp
the commit, before tcluster is installed. Git is asked only when --version is given, never
while a parser is built (`tcl` starts without running git).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

PACKAGE_DIR = Path(__file__).resolve().parent
COMMIT_FILE = "COMMIT"      # tcluster/COMMIT: one line, the commit a build was made from
UNKNOWN = "unknown"
GIT_TIMEOUT_S = 5.0         # a hung git (a stale NFS lock) must not hang `--version`


def git_commit(tree: Path) -> str | None:
    """The commit checked out at `tree` (12 hex, `+dirty` if tracked files differ), or None
    when `tree` is not the top of a git checkout or git is missing."""
    import subprocess      # here: `tcl` imports this module at every start, and runs git only for --version
    try:
        top = _git(tree, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != tree.resolve():
            return None     # e.g. a site-packages inside some other project's checkout
        commit = _git(tree, "rev-parse", "--short=12", "HEAD")
        if commit is None:
            return None
        dirty = subprocess.run(["git", "-C", str(tree), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=GIT_TIMEOUT_S).returncode == 1
    except (OSError, subprocess.TimeoutExpired):
        return None
    return commit + ("+dirty" if dirty else "")


def _git(tree: Path, *args: str) -> str | None:
    import subprocess
    done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def stamped_commit(package_dir: Path = PACKAGE_DIR) -> str | None:
    """The commit a build wrote into tcluster/COMMIT, if it did."""
    try:
        text = (package_dir / COMMIT_FILE).read_text().strip()
    except OSError:
        return None
    return text or None


def build_commit(package_dir: Path = PACKAGE_DIR) -> str:
    """The commit this tcluster runs from: a checkout's (live), else the stamped one, else 'unknown'."""
    return git_commit(package_dir.parent) or stamped_commit(package_dir) or UNKNOWN


def version_text(prog: str, package_dir: Path = PACKAGE_DIR) -> str:
    """What `PROG --version` prints: `tcl 0.1.0 (commit d56a8d0c1e2f)`."""
    from tcluster import __version__    # here: the build scripts load this file without the package
    return f"{prog} {__version__} (commit {build_commit(package_dir)})"


class VersionAction(argparse.Action):
    """argparse's `version` action, with the text made only when the flag is given."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "print the version and the git commit it was built from, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> NoReturn:
        print(version_text(parser.prog))
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=VersionAction)


if __name__ == "__main__":      # `python tcluster/version.py DIR`: the commit of the checkout at DIR (build scripts)
    print(git_commit(Path(sys.argv[1])) or UNKNOWN)
