"""mypy over the installed package: strict in the rooms that are clean (pyproject's
[[tool.mypy.overrides]]), default elsewhere against a baseline that may only shrink.

The package is assembled from top-level folders (pyproject's package-dir), which mypy cannot
follow, so it checks a tree of symlinks laid out as the import package under build/. The
baseline (tests/unit/mypy-baseline.txt) lists today's errors outside the strict rooms as
`file [code] message`, without line numbers so that an edit elsewhere in a file does not
move it. A new error fails; so does a listed one that is gone (take its line out: the list
only shrinks). `python -m tests.unit.test_types` prints the current list.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("mypy-baseline.txt")
BUILD = ROOT / "build"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: (?P<message>.*?)(?:  \[(?P<code>[a-z-]+)\])?$")


def package_dir() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def lay_out(out: Path) -> None:
    """out/tcluster as the import package: the top package's files, and a link per mapped folder."""
    mapping = package_dir()
    top = out / "tcluster"
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    top.mkdir(parents=True)
    for entry in (ROOT / mapping["tcluster"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for package, folder in mapping.items():
        parent, _, name = package.rpartition(".")
        if parent == "tcluster":
            (top / name).symlink_to(ROOT / folder)
        elif parent:    # a sub-package must sit in its parent's folder, or the links would miss it
            assert folder == f"{mapping[parent]}/{name}", f"{package} = {folder} is not under {mapping[parent]}"


def repo_path(mapped: str) -> str:
    """tcluster/master/core/state.py -> master/core/state.py, through package-dir."""
    mapping = package_dir()
    parts = mapped.removesuffix(".py").split("/")
    for cut in range(len(parts), 0, -1):
        folder = mapping.get(".".join(parts[:cut]))
        if folder is not None:
            return "/".join([folder, *parts[cut:]]) + ".py"
    return mapped


def errors() -> list[str]:
    """`file [code] message` for every error mypy reports, files as in this repository."""
    out = BUILD / "typecheck"
    lay_out(out)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(BUILD / "mypy-cache"), "--no-error-summary", "--hide-error-context",
                           "--no-pretty", "--show-error-codes", "-p", "tcluster"],
                          cwd=out, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 1) or "error:" in done.stderr:
        raise AssertionError(f"mypy did not run (exit {done.returncode}): {done.stderr[-2000:]}")
    found = []
    for line in done.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            found.append(f"{repo_path(match['path'])} [{match['code'] or 'misc'}] {match['message']}")
    return sorted(found)


def strict_rooms() -> list[str]:
    """The folders of the modules pyproject holds to the strict flags."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    patterns = [m for o in overrides if o.get("disallow_untyped_defs") for m in o["module"]]
    return sorted({repo_path(p.removesuffix(".*").replace(".", "/")).removesuffix(".py") for p in patterns})


def in_strict_room(error: str, rooms: list[str]) -> bool:
    path = error.split(" ", 1)[0]
    return any(path.startswith(room + "/") or path == room + ".py" for room in rooms)


@pytest.fixture(scope="module")
def found() -> list[str]:
    return errors()


def test_the_strict_rooms_have_no_type_error(found: list[str]) -> None:
    rooms = strict_rooms()
    assert "master/core" in rooms and "scheduler" in rooms      # the overrides are read, not empty
    strict = [e for e in found if in_strict_room(e, rooms)]
    assert not strict, "type errors in strict rooms:\n" + "\n".join(strict)


def test_no_type_error_beyond_the_baseline_and_the_baseline_only_shrinks(found: list[str]) -> None:
    baseline = Counter(line for line in BASELINE.read_text().splitlines() if line and not line.startswith("#"))
    current = Counter(found)
    new = sorted((current - baseline).elements())
    assert not new, "new type errors (fix them; the baseline may not grow):\n" + "\n".join(new)
    gone = sorted((baseline - current).elements())
    assert not gone, f"fixed, so take these lines out of {BASELINE.name}:\n" + "\n".join(gone)


if __name__ == "__main__":
    print("\n".join(errors()))
