"""Builds a wheel with the task supervisor compiled in (pyproject.toml has everything else).

agent/shim.c is compiled statically at wheel-build time into the package beside shim.c,
named tcl-shim-<first 16 hex of its sha256> as agent/runtime/shimbin.py names it, so nodes
installing the wheel need no compiler (the agent uses the shipped binary when present and
falls back to compiling on demand). The wheel is then tagged for this platform. Editable
installs (`pip install -e .`) skip it: a developer's agent compiles into its cache.
TCL_WHEEL_NO_SHIM=1 builds a wheel without it (a machine without libc6-dev).

A build from a git checkout also writes the checkout's commit into tcluster/COMMIT, which
`--version` prints (tcluster/version.py); a source without .git keeps the COMMIT it carries
(packaging/build_deb.py stamps its copy), else none is written and --version says "unknown"."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:                       # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "agent" / "shim.c"


def shim_name(source: bytes) -> str:
    """The same name as tcluster.agent.runtime.shimbin.binary_name (tests/unit/test_packaging.py)."""
    return f"tcl-shim-{hashlib.sha256(source).hexdigest()[:16]}"


def compile_static_shim(out_dir: Path) -> Path:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("setup.py: no C compiler for the task supervisor (apt-get install gcc libc6-dev), "
                         "or set TCL_WHEEL_NO_SHIM=1 for a wheel that compiles it on each node")
    out = out_dir / shim_name(SHIM_SOURCE.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([compiler, "-O2", "-Wall", "-pthread", "-static", "-o", str(out), str(SHIM_SOURCE)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"setup.py: cannot build the static task supervisor:\n{done.stderr[-2000:]}")
    out.chmod(0o755)
    return out


def stamp_commit(package_dir: Path) -> None:
    """tcluster/COMMIT in the build from this checkout's git, when it is one."""
    spec = importlib.util.spec_from_file_location("tcl_version", HERE / "tcluster" / "version.py")
    assert spec is not None and spec.loader is not None
    version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(version)
    commit = version.git_commit(HERE)
    if commit is not None:
        package_dir.mkdir(parents=True, exist_ok=True)
        (package_dir / version.COMMIT_FILE).write_text(commit + "\n")


class BuildWithShim(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return      # the checkout itself is imported: --version asks its git
        stamp_commit(Path(self.build_lib) / "tcluster")
        if os.environ.get("TCL_WHEEL_NO_SHIM"):
            return
        compile_static_shim(Path(self.build_lib) / "tcluster" / "agent")


class WithBinary(Distribution):
    """A binary inside: the wheel installs into platlib and is tagged for this platform."""

    def has_ext_modules(self) -> bool:
        return not os.environ.get("TCL_WHEEL_NO_SHIM")


class PlatformWheel(bdist_wheel):
    """Pure Python plus one static binary (no libpython ABI): py3-none-<platform>."""

    def get_tag(self) -> tuple[str, str, str]:
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if not self.root_is_pure else (python, abi, plat)


if __name__ == "__main__":
    setup(distclass=WithBinary, cmdclass={"build_py": BuildWithShim, "bdist_wheel": PlatformWheel})
