"""`--version` of tcl and the daemons: the package version and the commit, from a checkout's git
(live, `+dirty`), else the file a build stamped (tcluster/COMMIT), else "unknown"."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tcluster import __version__
from tcluster.cli.main import main as tcl_main
from tcluster.version import UNKNOWN, build_commit, git_commit, version_text

REPO = Path(__file__).resolve().parents[2]
HAS_GIT = shutil.which("git") is not None
needs_git = pytest.mark.skipif(not HAS_GIT, reason="git is not installed")


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


def checkout(root: Path) -> Path:
    """A git checkout at `root` with a tcluster/ package folder, one commit; returns the folder."""
    package = root / "tcluster"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.1.0"\n')
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "one")
    return package


@needs_git
def test_a_checkout_names_its_commit_and_says_dirty(tmp_path: Path) -> None:
    package = checkout(tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD")
    assert build_commit(package) == head[:12]
    assert version_text("tcl", package) == f"tcl {__version__} (commit {head[:12]})"
    (package / "__init__.py").write_text('__version__ = "0.1.1"\n')      # a tracked file changed
    assert build_commit(package) == head[:12] + "+dirty"


@needs_git
def test_the_checkout_wins_over_a_stamped_commit(tmp_path: Path) -> None:
    package = checkout(tmp_path)
    (tmp_path / ".gitignore").write_text("")     # untracked files do not make it dirty
    (package / "COMMIT").write_text("0123456789ab\n")
    assert build_commit(package) == git(tmp_path, "rev-parse", "--short=12", "HEAD")


def test_without_a_checkout_the_stamped_commit_else_unknown(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "tcluster"
    package.mkdir(parents=True)
    assert build_commit(package) == UNKNOWN
    assert version_text("tcl-agent", package) == f"tcl-agent {__version__} (commit unknown)"
    (package / "COMMIT").write_text("0123456789ab\n")
    assert build_commit(package) == "0123456789ab"


@needs_git
def test_an_install_inside_another_checkout_does_not_take_its_commit(tmp_path: Path) -> None:
    """A venv under some project's checkout: site-packages/tcluster is not that project."""
    checkout(tmp_path)
    package = tmp_path / ".venv" / "lib" / "site-packages" / "tcluster"
    package.mkdir(parents=True)
    assert git_commit(package.parent) is None
    assert build_commit(package) == UNKNOWN


def test_without_git_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))     # no git on PATH
    assert git_commit(REPO) is None
    package = tmp_path / "tcluster"
    package.mkdir()
    assert build_commit(package) == UNKNOWN
    (package / "COMMIT").write_text("feedfacecafe\n")
    assert build_commit(package) == "feedfacecafe"


def test_tcl_version_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = tcl_main(["--version"])
    assert code == 0
    assert re.fullmatch(rf"tcl {re.escape(__version__)} \(commit ([0-9a-f]{{12}}(\+dirty)?|unknown)\)\n",
                        out.getvalue())
    if HAS_GIT and (REPO / ".git").exists():
        assert git(REPO, "rev-parse", "--short=12", "HEAD") in out.getvalue()


@pytest.mark.parametrize("program, module", [("tcl-master", "tcluster.master.app.main"),
                                             ("tcl-agent", "tcluster.agent.main"), ("tcl-gm", "tcluster.gm.main")])
def test_each_daemon_prints_its_version_and_exits_0(program: str, module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main(['--version']))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{program} {__version__} (commit "), done.stdout
    assert done.stdout.strip() == version_text(program)


@needs_git
def test_setup_py_stamps_the_build_with_the_checkout_commit(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("tcl_setup_stamp", REPO / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)                   # not __main__: setup() does not run
    setup.stamp_commit(tmp_path / "tcluster")
    expected = git_commit(REPO)
    if expected is None:
        assert not (tmp_path / "tcluster" / "COMMIT").exists()
    else:
        assert (tmp_path / "tcluster" / "COMMIT").read_text() == expected + "\n"
