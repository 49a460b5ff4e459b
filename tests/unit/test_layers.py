"""The import rule between the tree's rooms, read from every .py file's imports with `ast`.

Every import counts: module-level, inside functions, and under `if TYPE_CHECKING:` too (a
type-only import still ties the reader of one room to another, and the rule is about what a
reader must know). Files map to rooms through pyproject.toml's package-dir (tcluster.master ->
master/), so the check sees the real graph rather than the flat `tcluster.*` namespace.

A room is the folder of one installed package (`master/core`, `tcluster/security`), or a top-level
folder outside the package (`tests`, `bench`, `testkit`). Rules name rooms by prefix: `master`
means the master's root and all its sub-rooms, `master/` its root alone.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}

DAEMONS = ("master", "agent", "gm")
POLICIES = ("scheduler", "sim", "pack", "federation")
TEST_CODE = ("testkit", "tests", "bench")


def within(room: str, prefixes: Iterable[str]) -> bool:
    """Whether a room is one of `prefixes` or below one; `X/` names the room X alone."""
    return any(room == p.rstrip("/") if p.endswith("/") else room == p or room.startswith(p + "/")
               for p in prefixes)


@dataclass(frozen=True)
class Rule:
    """Files in rooms under `sources` (None: in any room) may not import modules in rooms under
    `banned` (or, with `only`, in any other room of the tree). A room may always import itself."""

    name: str
    sources: tuple[str, ...] | None
    banned: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None

    def breaks(self, source: str, target: str) -> bool:
        if (self.sources is not None and not within(source, self.sources)) or target == source:
            return False
        if self.only is not None:
            return not within(target, self.only)
        return within(target, self.banned)


def rules(installed: frozenset[str]) -> tuple[Rule, ...]:
    """The rules, with the installed rooms read from pyproject (a new package is covered at once)."""
    return (
        Rule("the core imports only tcluster/ and scheduler/", ("master/core",), only=("tcluster", "scheduler")),
        Rule("policies import no daemon or CLI", POLICIES, banned=(*DAEMONS, "cli")),
        Rule("the ground floor imports no daemon, CLI or policy", ("tcluster",),
             banned=(*DAEMONS, "cli", *POLICIES)),
        Rule("the agent imports nothing of the master, the GM or the CLI", ("agent",), banned=("master", "gm", "cli")),
        Rule("the master imports nothing of the agent, the GM or the CLI", ("master",), banned=("agent", "gm", "cli")),
        Rule("the GM imports nothing of the master, the agent or the CLI", ("gm",), banned=("master", "agent", "cli")),
        Rule("the master's lower rooms import only the core and each other",
             ("master/store", "master/usage", "master/identity"),
             banned=tuple(sorted(r + "/" for r in installed if within(r, ("master",))
                                 and not within(r, ("master/core", "master/store", "master/usage",
                                                    "master/identity"))))),
        Rule("the installed package imports no test code", tuple(sorted(r + "/" for r in installed)),
             banned=TEST_CODE),
        Rule("nothing outside tests/ imports tests/", None, banned=("tests",)),
    )


class Layout:
    """Maps dotted modules and repository files to rooms, through pyproject's package-dir."""

    def __init__(self, root: Path, planted: Iterable[str] = ()) -> None:
        self.root = root
        self.planted = frozenset(planted)
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        self.package_dir: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
        self.installed = frozenset(self.package_dir.values())

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

    def file_of(self, path: str) -> str | None:
        """The repository file of a path without .py: the module, or the package's __init__."""
        for rel in (path + ".py", path + "/__init__.py"):
            if rel in self.planted or (self.root / rel).is_file():
                return rel
        return None

    def resolve(self, name: str) -> tuple[str, str] | None:
        """(module, file) for an imported name: `from m import f` names m when f is no module."""
        path = self.path_of(name)
        if path is None:
            return None
        if "." in name and self.file_of(path) is None:
            name, path = name.rpartition(".")[0], path.rpartition("/")[0]
        found = self.file_of(path)
        return None if found is None else (name, found)

    def room(self, rel: str) -> str:
        """The room of a repository file: the deepest installed folder holding it, else its top folder."""
        folder = rel.rpartition("/")[0]
        best = max((d for d in self.installed if folder == d or folder.startswith(d + "/")), key=len, default=None)
        return best if best is not None else rel.split("/")[0]


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


def python_files(root: Path) -> Iterator[str]:
    """Every .py file under the root (relative, posix), less virtual environments and build output."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if not SKIP_DIRS.intersection(rel) and not any(p.endswith(".egg-info") for p in rel):
            yield path.relative_to(root).as_posix()


@dataclass(frozen=True)
class Edge:
    """One import: the importing file and line, the imported module and the file it lives in."""

    source: str
    line: int
    module: str
    target: str


def file_edges(layout: Layout, rel: str, text: str) -> list[Edge]:
    """The imports of one file that land on another file of the tree."""
    tree = ast.parse(text, filename=rel)
    found = []
    for line, name in imports(tree, layout.module_of(rel), rel.endswith("/__init__.py")):
        resolved = layout.resolve(name)
        if resolved is not None and resolved[1] != rel:
            found.append(Edge(rel, line, *resolved))
    return found


@functools.cache
def tree_edges(root: Path) -> tuple[Edge, ...]:
    """Every import between the tree's files, read once per run."""
    layout = Layout(root)
    return tuple(e for rel in python_files(root) for e in file_edges(layout, rel, (root / rel).read_text()))


def edges(root: Path, planted: dict[str, str] | None = None) -> list[Edge]:
    """Every import between files of the tree; `planted` adds (or replaces) files' texts, unwritten."""
    planted = planted or {}
    layout = Layout(root, planted)
    kept = [e for e in tree_edges(root) if e.source not in planted]
    return kept + [e for rel, text in planted.items() for e in file_edges(layout, rel, text)]


def violations(root: Path, planted: dict[str, str] | None = None) -> list[str]:
    """`file:line imports module (rule)` for each import that breaks a rule."""
    layout = Layout(root, planted or {})
    found: dict[str, None] = {}
    for edge in edges(root, planted):
        source, target = layout.room(edge.source), layout.room(edge.target)
        found.update((f"{edge.source}:{edge.line} imports {edge.module} ({rule.name})", None)
                     for rule in rules(layout.installed) if rule.breaks(source, target))
    return list(found)


def file_cycles(found: list[Edge]) -> list[frozenset[str]]:
    """The strongly connected sets of two or more files (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {}
    for edge in found:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    cycles.append(frozenset(members))
    return cycles


# File cycles allowed for now; none may be added. An entry that no longer matches a cycle of
# the tree fails the test too, so the list only shrinks (it is empty: keep it so).
ALLOWED_CYCLES: tuple[frozenset[str], ...] = ()


def test_the_tree_keeps_the_import_rule() -> None:
    offending = violations(ROOT)
    assert not offending, "upward imports:\n" + "\n".join(offending)


def test_no_new_file_cycle_and_the_allow_list_only_shrinks() -> None:
    cycles = file_cycles(edges(ROOT))
    new = [sorted(c) for c in cycles if c not in ALLOWED_CYCLES]
    assert not new, f"new import cycles between files: {new}"
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in cycles]
    assert not gone, f"these cycles are gone or changed: take them off ALLOWED_CYCLES: {gone}"


# One planted file per kind of import the review found unchecked (review-layout-649a338.md §2.5):
# each must be named, against the real tree and its pyproject.
PROBES = {
    "gm/zz_probe_testkit.py": "from testkit import fake_lm\n",
    "gm/zz_probe_cli.py": "from tcluster.cli import main\n",
    "gm/zz_probe_agent.py": "def f():\n    import tcluster.agent.daemon\n",
    "gm/zz_probe_master.py": "from tcluster.master.core import state\n",
    "federation/zz_probe.py": "from tcluster.gm import daemon\n",
    "tcluster/zz_probe.py": "from tcluster.gm import daemon\n",
    "master/core/zz_probe.py": "from tcluster.gm import daemon\n",
    "agent/zz_probe.py": "from tcluster.gm import daemon\n",
    "scheduler/zz_probe.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tcluster.gm import daemon\n",
    "master/store/zz_probe.py": "from tcluster.master import service\n",
    "master/usage/zz_probe.py": "from tcluster.master.web import api\n",
    "master/identity/zz_probe.py": "from tcluster.master.edge import grpc_api\n",
}


def test_every_planted_probe_is_reported() -> None:
    for rel, text in PROBES.items():
        found = [v for v in violations(ROOT, {rel: text}) if v.startswith(rel + ":")]
        assert found, f"{rel} ({text.strip()!r}) passed the import rule"


def test_a_planted_cycle_is_reported() -> None:
    planted = {"tcluster/zz_a.py": "from tcluster import zz_b\n", "tcluster/zz_b.py": "from tcluster import zz_a\n"}
    cycles = file_cycles(edges(ROOT, planted))
    assert frozenset(planted) in cycles


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_checker_reports_each_kind_of_breach(tmp_path: Path) -> None:
    """A small tree with one breach per rule: the checker must name every one, with its line."""
    _write(tmp_path, {
        "pyproject.toml": '[tool.setuptools.package-dir]\n"tcluster" = "tcluster"\n'
                          '"tcluster.master" = "master"\n"tcluster.master.core" = "master/core"\n'
                          '"tcluster.master.web" = "master/web"\n"tcluster.master.store" = "master/store"\n'
                          '"tcluster.agent" = "agent"\n"tcluster.cli" = "cli"\n"tcluster.gm" = "gm"\n'
                          '"tcluster.scheduler" = "scheduler"\n"tcluster.sim" = "sim"\n'
                          '"tcluster.v1" = "proto/tcluster/v1"\n',
        "tcluster/__init__.py": "", "tcluster/domain/model.py": "from tcluster.v1 import jobs_pb2\n",
        "tcluster/wire/protobuf.py": "from tcluster.scheduler.queuestats import QueueRow\n",
        "master/__init__.py": "", "master/service.py": "from tcluster.agent import settings\n",
        "master/core/__init__.py": "",
        "master/core/state.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from tcluster.master import service\nfrom . import events\n",
        "master/core/events.py": "def f():\n    from ...cli.main import main\n",
        "master/store/__init__.py": "", "master/store/sqlite.py": "from tcluster.master.web import api\n",
        "agent/__init__.py": "", "agent/daemon.py": "import tcluster.master.server\n",
        "gm/__init__.py": "", "gm/daemon.py": "from tcluster.master.core import state\n",
        "scheduler/__init__.py": "", "scheduler/round.py": "from tcluster.domain import model\n",
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
        "agent/daemon.py:1 imports tcluster.master.server (the agent imports nothing of the master, the GM or the CLI)",
        "bench/x.py:1 imports tests.e2e.procs (nothing outside tests/ imports tests/)",
        "gm/daemon.py:1 imports tcluster.master.core.state (the GM imports nothing of the master, the agent or the CLI)",
        "master/core/events.py:2 imports tcluster.cli.main (the core imports only tcluster/ and scheduler/)",
        "master/core/events.py:2 imports tcluster.cli.main (the master imports nothing of the agent, the GM or the CLI)",
        "master/core/state.py:3 imports tcluster.master.service (the core imports only tcluster/ and scheduler/)",
        "master/service.py:1 imports tcluster.agent.settings "
        "(the master imports nothing of the agent, the GM or the CLI)",
        "master/store/sqlite.py:1 imports tcluster.master.web.api "
        "(the master's lower rooms import only the core and each other)",
        "master/web/api.py:3 imports testkit.loadgen (the installed package imports no test code)",
        "sim/report.py:1 imports tcluster.cli.tables (policies import no daemon or CLI)",
        "tcluster/wire/protobuf.py:1 imports tcluster.scheduler.queuestats "
        "(the ground floor imports no daemon, CLI or policy)",
    ])
