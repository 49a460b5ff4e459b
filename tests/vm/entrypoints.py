"""The guest venv's console scripts (/opt/tcl-venv/bin/tcl, tcl-master, tcl-agent, tcl-gm),
made from pyproject.toml's [project.scripts] as pip would make them. The image gets them when
it is built, and the guest writes them again from the shared repo at every boot: a cached
image must not keep an entry point that has moved since (tcl-master's went from
tcluster.master.main to tcluster.master.app.main). Standard library only: it runs in the guest."""

from __future__ import annotations

import tomllib
from pathlib import Path


def scripts(pyproject: Path) -> dict[str, str]:
    """name -> the script's text, for every [project.scripts] entry."""
    with open(pyproject, "rb") as f:
        entries: dict[str, str] = tomllib.load(f)["project"]["scripts"]
    out = {}
    for name, target in entries.items():
        module, _, function = target.partition(":")
        out[name] = (f"#!/opt/tcl-venv/bin/python\nimport sys\nfrom {module} import {function}\n"
                     f"sys.exit({function}())\n")
    return out


def write(pyproject: Path, bin_dir: Path) -> list[str]:
    """Writes (or rewrites) the scripts into bin_dir; their names."""
    for name, text in scripts(pyproject).items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return sorted(scripts(pyproject))
