"""Imports `tcluster.*` from the repo shared read-only at /mnt/repo, with the package-dir
mapping pyproject.toml declares (what `pip install -e .` does on the host)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import tomllib

REPO = os.environ.get("TCL_REPO", "/mnt/repo")


class _RepoFinder(importlib.abc.MetaPathFinder):
    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        where = self.mapping.get(fullname)
        if where is None:
            return None
        init = os.path.join(where, "__init__.py")
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[where])


def _install() -> None:
    try:
        with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
            dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return
    sys.meta_path.insert(0, _RepoFinder({name: os.path.join(REPO, d) for name, d in dirs.items()}))


_install()
