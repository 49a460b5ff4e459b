"""The import rule between the tree's rooms, read from every .py file's imports with `ast`.

Every import counts: module-level, inside functions, and under `if TYPE_CHECKING:` too (a
type-only import still ties the reader of one room to another, and the rule is about what a
reader must know). Files map to rooms through pyproject.toml's package-dir (tcluster.master ->
master/), so the check sees the real graph rather than the flat `tcluster.*` namespace.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}

DAEMONS = frozenset({"master", "master/core", "agent"})
INSTALLED = frozenset({"tcluster", "master", "master/core", "agent", "cli", "scheduler", "sim", "pack", "federation"})


@dataclass(frozen=True)
class Rule:
    """Files in `sources` (None: in any room) may not import modules in `banned` (or, with
    `only`, anything else in the tree). A room may always import itself."""

    name: str
    sources: frozenset[str] | None
    banned: frozenset[str] = frozenset()
    only: frozenset[str] | None = None

    def breaks(self, source: str, target: str) -> bool:
        if (self.sources is not None and source not in self.sources) or target == source:
            return False
        if self.only is not None:
            return target not in self.only
        return target in self.banned


RULES = (
    Rule("the core imports only tcluster/ and scheduler/", frozenset({"master/core"}),
         only=frozenset({"tcluster", "scheduler"})),
    Rule("policies import no daemon or CLI", frozenset({"scheduler", "sim", "pack", "federation"}),
         banned=frozenset(DAEMONS | {"cli"})),
    Rule("the ground floor imports no daemon, CLI or policy", frozenset({"tcluster"}),
         banned=frozenset(DAEMONS | {"cli", "scheduler", "sim", "pack", "federation"})),
    Rule("the agent imports nothing of the master or CLI", frozenset({"agent"}),
         banned=frozenset({"master", "master/core", "cli"})),
    Rule("the master imports nothing of the agent or CLI", frozenset({"master", "master/core"}),
         banned=frozenset({"agent", "cli"})),
    Rule("the installed package imports no test code", INSTALLED, banned=frozenset({"testkit", "tests", "bench"})),
    Rule("nothing outside tests/ imports tests/", None, banned=frozenset({"tests"})),
)


class Layout:
    """Maps dotted modules and repository files to rooms, through pyproject's package-dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        self.package_dir: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]

    def path_of(self, module: str) -> str | None:
        """The repository path (without .py) a dotted name lives at; None outside the tree."""
        parts = module.split(".")
        for cut in range(len(parts), 0, -1):
            folder = self.package_dir.get(".".join(parts[:cut]))
            if folder is not None:
                return "/".join([folder, *parts[cut:]])
        top = self.root / parts[0]
        if (top / "__init__.py").is_file() or top.with_suffix(".py").is_file():
            return "/".join(parts)
        return None

    def module_of(self, rel: str) -> str:
        """The dotted name a repository file is imported as (its package, for __init__.py)."""
        stem = rel.removesuffix(".py").removesuffix("/__init__")
        best = max((p for p, d in self.package_dir.items() if stem == d or stem.startswith(d + "/")),
                   key=lambda p: len(self.package_dir[p]), default=None)
        if best is None:
            return stem.replace("/", ".")
        rest = stem[len(self.package_dir[best]):].strip("/")
        return ".".join(x for x in [best, rest.replace("/", ".")] if x)

    def exists(self, path: str) -> bool:
        """Whether a repository path (without .py) is a module or package in the tree."""
        return (self.root / path).with_suffix(".py").is_file() or (self.root / path / "__init__.py").is_file()

    def resolve(self, name: str) -> tuple[str, str] | None:
        """(module, path) for an imported name: `from m import f` names m when f is no module."""
        path = self.path_of(name)
        if path is None:
            return None
        if "." in name and not self.exists(path):
            name, path = name.rpartition(".")[0], path.rpartition("/")[0]
        return name, path

    @staticmethod
    def room(path: str) -> str:
        """The room of a repository path: master/core apart from master/, proto/ on the ground floor."""
        top = path.split("/")[0]
        if path.startswith("master/core/") or path == "master/core":
            return "master/core"
        return "tcluster" if top == "proto" else top


def imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) for every import in a file; `from X import y` yields X.y."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(x for x in [*anchor, base] if x)
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}"


def python_files(root: Path) -> Iterator[Path]:
    """Every .py file under the root, less virtual environments and build output."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if not SKIP_DIRS.intersection(rel) and not any(p.endswith(".egg-info") for p in rel):
            yield path


def violations(root: Path) -> list[str]:
    """`file:line imports module (rule)` for each import that breaks a rule."""
    layout = Layout(root)
    found: dict[str, None] = {}
    for path in python_files(root):
        rel = path.relative_to(root).as_posix()
        source = layout.room(rel)
        tree = ast.parse(path.read_text(), filename=rel)
        for line, name in imports(tree, layout.module_of(rel), path.name == "__init__.py"):
            resolved = layout.resolve(name)
            if resolved is None:
                continue
            module, target = resolved[0], layout.room(resolved[1])
            found.update((f"{rel}:{line} imports {module} ({rule.name})", None)
                         for rule in RULES if rule.breaks(source, target))
    return list(found)


def test_the_tree_keeps_the_import_rule() -> None:
    offending = violations(ROOT)
    assert not offending, "upward imports:\n" + "\n".join(offending)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_checker_reports_each_kind_of_breach(tmp_path: Path) -> None:
    """A small tree with one breach per rule: the checker must name every one, with its line."""
    _write(tmp_path, {
        "pyproject.toml": '[tool.setuptools.package-dir]\n"tcluster" = "tcluster"\n'
                          '"tcluster.master" = "master"\n"tcluster.master.core" = "master/core"\n'
                          '"tcluster.agent" = "agent"\n"tcluster.cli" = "cli"\n'
                          '"tcluster.scheduler" = "scheduler"\n"tcluster.sim" = "sim"\n'
                          '"tcluster.v1" = "proto/tcluster/v1"\n',
        "tcluster/__init__.py": "", "tcluster/model.py": "from tcluster.v1 import jobs_pb2\n",
        "tcluster/wire.py": "from tcluster.scheduler.queuestats import QueueRow\n",
        "master/__init__.py": "", "master/service.py": "from tcluster.agent import settings\n",
        "master/core/__init__.py": "",
        "master/core/state.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from tcluster.master import service\nfrom . import events\n",
        "master/core/events.py": "def f():\n    from ...cli.main import main\n",
        "agent/__init__.py": "", "agent/daemon.py": "import tcluster.master.server\n",
        "scheduler/__init__.py": "", "scheduler/round.py": "from tcluster import model\n",
        "sim/__init__.py": "", "sim/report.py": "from tcluster.cli.tables import format_table\n",
        "master/web/__init__.py": "", "master/web/api.py": "\n\nimport testkit.loadgen\n",
        "bench/__init__.py": "", "bench/x.py": "from tests.e2e.procs import BIN\n",
        "tests/__init__.py": "", "tests/t.py": "from tests.e2e import procs\n",
        **{f: "" for f in ("tests/e2e/__init__.py", "tests/e2e/procs.py", "cli/__init__.py", "cli/main.py",
                           "cli/tables.py", "testkit/__init__.py", "testkit/loadgen/__init__.py",
                           "scheduler/queuestats.py", "master/server.py", "agent/settings.py",
                           "proto/tcluster/v1/__init__.py", "proto/tcluster/v1/jobs_pb2.py")},
    })
    found = violations(tmp_path)
    assert sorted(found) == sorted([
        "agent/daemon.py:1 imports tcluster.master.server (the agent imports nothing of the master or CLI)",
        "bench/x.py:1 imports tests.e2e.procs (nothing outside tests/ imports tests/)",
        "master/core/events.py:2 imports tcluster.cli.main (the core imports only tcluster/ and scheduler/)",
        "master/core/events.py:2 imports tcluster.cli.main (the master imports nothing of the agent or CLI)",
        "master/core/state.py:3 imports tcluster.master.service (the core imports only tcluster/ and scheduler/)",
        "master/service.py:1 imports tcluster.agent.settings (the master imports nothing of the agent or CLI)",
        "master/web/api.py:3 imports testkit.loadgen (the installed package imports no test code)",
        "sim/report.py:1 imports tcluster.cli.tables (policies import no daemon or CLI)",
        "tcluster/wire.py:1 imports tcluster.scheduler.queuestats "
        "(the ground floor imports no daemon, CLI or policy)",
    ])
