"""The queue tree: departments -> groups, read from YAML. Jobs hang off leaf queues.

    queues:
      ads:
        weight: 60
        queues:
          prod: {weight: 90}
          test: {weight: 10}
      dev: {weight: 40, queues: {prod: {weight: 90}, test: {weight: 10}}}

A queue is a mapping with `weight` (default 1, must be > 0) and optional child `queues`;
`max_job_weight` (default 1, > 0) caps the weight a non-admin's job may ask for in it, so
nobody buys a bigger share of the queue by asking. `hide_command: true` shows a job's
command only to its owner and admins (default: its parent's; at the top, false: shown).
`preemptable: false` protects the queue's tasks (and its subtree's) from preemption
(default: its parent's; at the top, true). `max_time_limit: 2h` caps a job's --time-limit
there and is the limit of a job that gives none (default: its parent's; at the top, none).
`share: users` (default: its parent's; at the top, users) shares a leaf between its users
first, then each user's jobs; `share: jobs` makes every job a sibling (scheduler/usershare.py).
A queue may instead name its parent (`prod: {parent: ads}` at the top level), which is
how a cycle or an unknown parent can be written, and both are refused. A leaf is named
by its path (`ads.prod`). Without a file there is one leaf, `default`. The quota keys
(`max`, `borrow_limit`, `lend_limit`, `max_running_per_user`, `max_pending_per_user`) are
scheduler/quotas.py's."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path as FsPath
from typing import Any, Iterator

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import DEFAULT_QUEUE
from tcluster.domain.units import parse_duration
from tcluster.scheduler.quotas import QUOTA_KEYS, QueueCaps, parse_caps
from tcluster.scheduler.yamlsrc import YamlConfigError, Located, Path, load_located, read_config_file

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
_QUEUE_KEYS: tuple[str, ...] = ("weight", "queues", "parent", "max_job_weight", "hide_command", "preemptable",
                               "max_time_limit", "share")
_QUEUE_KEYS += QUOTA_KEYS    # max, borrow_limit, lend_limit, max_*_per_user: scheduler/quotas.py
SHARE_MODES = ("users", "jobs")


@dataclass(frozen=True)
class QueueNode:
    name: str
    path: str                          # "" for the root
    weight: float = 1.0
    children: tuple[QueueNode, ...] = ()
    line: int = 0
    max_job_weight: float = 1.0        # a non-admin's job may ask at most this weight here
    hide_command: bool | None = None   # None: as the parent queue
    preemptable: bool | None = None    # False: its tasks are never preempted; None: as the parent
    max_time_limit_s: float | None = None   # a job's --time-limit at most (and its default); None: as the parent
    caps: QueueCaps = QueueCaps()           # quotas for its subtree (scheduler/quotas.py)
    share: str | None = None           # "users" | "jobs": who shares a leaf first; None: as the parent

    @property
    def leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class QueueTree:
    root: QueueNode
    source: str = ""
    # ("leaf/user", weight): a user's weight in its leaf (default 1); only decayed usage
    # sets them, on the copy the fairness round sees (scheduler/decay.py)
    user_weights: tuple[tuple[str, float], ...] = ()

    @cached_property
    def _user_weight(self) -> dict[str, float]:
        return dict(self.user_weights)

    def user_weight(self, leaf: str, user: str) -> float:
        return self._user_weight.get(f"{leaf}/{user}", 1.0) if self.user_weights else 1.0

    @cached_property
    def _by_path(self) -> dict[str, QueueNode]:
        return {node.path: node for node in self.walk()}

    @cached_property
    def _parent(self) -> dict[str, str]:
        return {child.path: node.path for node in self.walk() for child in node.children}

    def walk(self) -> Iterator[QueueNode]:
        """Pre-order, children in file order; the root first."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def node(self, path: str) -> QueueNode | None:
        return self._by_path.get(path)

    def parent(self, path: str) -> str | None:
        return self._parent.get(path)

    @cached_property
    def leaves(self) -> tuple[str, ...]:
        return tuple(n.path for n in self.walk() if n.leaf and n.path)

    def is_leaf(self, path: str) -> bool:
        node = self.node(path)
        return node is not None and node.leaf and bool(path)

    def guaranteed_share(self, path: str) -> float:
        """The hierarchical share guarantee: the product of weight / sum of sibling
        weights on the way down, i.e. the share `path` gets when every queue is busy."""
        share = 1.0
        while path:
            parent = self.node(self._parent[path])
            assert parent is not None
            share *= self._by_path[path].weight / sum(c.weight for c in parent.children)
            path = parent.path
        return share

    def max_job_weight(self, path: str) -> float:
        node = self.node(path)
        return node.max_job_weight if node is not None else 1.0

    def hides_command(self, path: str) -> bool:
        """The nearest `hide_command` set on the way up from `path`; False if none is."""
        while path in self._by_path:
            if self._by_path[path].hide_command is not None:
                return bool(self._by_path[path].hide_command)
            if not path:
                break
            path = self._parent[path]
        return False

    def preemptable(self, path: str) -> bool:
        """The nearest `preemptable` set on the way up from `path`; True if none is (a
        queue not in the tree, left over from an older file, is preemptable too)."""
        while path in self._by_path:
            if self._by_path[path].preemptable is not None:
                return bool(self._by_path[path].preemptable)
            if not path:
                break
            path = self._parent[path]
        return True

    def max_time_limit_s(self, path: str) -> float:
        """The nearest `max_time_limit` on the way up from `path`; 0 if none is (no limit)."""
        while path in self._by_path:
            limit = self._by_path[path].max_time_limit_s
            if limit is not None:
                return float(limit)
            if not path:
                break
            path = self._parent[path]
        return 0.0

    def shares_users(self, path: str) -> bool:
        """The nearest `share` on the way up from `path`; users if none is (a queue not in
        the tree, left over from an older file, shares by users too)."""
        while path in self._by_path:
            share = self._by_path[path].share
            if share is not None:
                return share == "users"
            if not path:
                break
            path = self._parent[path]
        return True

    def check_leaf(self, path: str, field: str = "queue") -> None:
        if self.is_leaf(path):
            return
        what = "is not a leaf queue" if self.node(path) is not None else "is not a queue"
        raise InvalidArgument(field, f"{path[:64]!r} {what}; submit to one of: {', '.join(self.leaves[:50])}")


def default_tree() -> QueueTree:
    return QueueTree(QueueNode("", "", children=(QueueNode(DEFAULT_QUEUE, DEFAULT_QUEUE),)), "built-in")


def load_queue_file(path: FsPath | str) -> QueueTree:
    """Reads and checks a queue file; raises YamlConfigError naming the line."""
    return parse_queue_text(read_config_file(path, "the queue file"), str(path))


def parse_queue_text(text: str, source: str) -> QueueTree:
    doc = load_located(text, source)
    if not isinstance(doc.value, dict) or "queues" not in doc.value:
        raise doc.error((), "the file must be a mapping with a `queues:` mapping at the top")
    extra = sorted(str(k) for k in doc.value if k != "queues")
    if extra:
        raise doc.error((extra[0],), "unknown key; a queue file holds only `queues:`")
    return QueueTree(queues_from_located(doc, ("queues",)), source)


def queues_from_located(doc: Located, at: Path) -> QueueNode:
    """The root of the tree under `doc` at path `at` (also used by sim scenarios)."""
    value = _get(doc, at)
    if not isinstance(value, dict) or not value:
        raise doc.error(at, "must be a mapping of queue names to {weight, queues}")
    top: list[QueueNode] = []
    adopted: list[tuple[str, QueueNode, Path]] = []   # (parent path, node, where)
    for name, body in value.items():
        node, parent = _queue(doc, (*at, name), str(name), str(name))
        if parent is None:
            top.append(node)
        else:
            adopted.append((parent, node, (*at, name, "parent")))
    root = QueueNode("", "", children=tuple(top))
    return _adopt(doc, root, adopted)


def _get(doc: Located, path: Path) -> Any:
    value = doc.value
    for part in path:
        value = value[part]
    return value


def _queue(doc: Located, where: Path, name: str, path: str) -> tuple[QueueNode, str | None]:
    body = _get(doc, where)
    if not _NAME.match(name):
        raise doc.error(where, "a queue name is 1-63 of A-Z a-z 0-9 _ - (a dot separates path parts)")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise doc.error(where, "must be a mapping with `weight` and optional `queues`")
    for key in body:
        if key not in _QUEUE_KEYS:
            raise doc.error((*where, key), f"unknown key; a queue has {', '.join(_QUEUE_KEYS)}")
    weight = _weight(doc, (*where, "weight"), body.get("weight", 1))
    max_job_weight = _weight(doc, (*where, "max_job_weight"), body.get("max_job_weight", 1))
    hide_command, preemptable = _flag(doc, where, body, "hide_command"), _flag(doc, where, body, "preemptable")
    parent = body.get("parent")
    if parent is not None and (not isinstance(parent, str) or len(where) > 2):
        raise doc.error((*where, "parent"), "`parent` is a queue path, allowed on top-level queues only")
    children = _children(doc, (*where, "queues"), body, path)
    return QueueNode(name, path, weight, children, doc.line(where), max_job_weight, hide_command,
                     preemptable, _time_limit(doc, where, body), caps=parse_caps(doc, where, body),
                     share=_share(doc, where, body)), parent


def _share(doc: Located, where: Path, body: dict[Any, Any]) -> str | None:
    value = body.get("share")
    if value is not None and value not in SHARE_MODES:
        raise doc.error((*where, "share"), f"{value!r} is not allowed; use users (users first, then their jobs) "
                                           "or jobs (every job a sibling)")
    return value


def _time_limit(doc: Located, where: Path, body: dict[Any, Any]) -> float | None:
    value = body.get("max_time_limit")
    if value is None:
        return None
    try:
        seconds = parse_duration(value, "max_time_limit")
    except InvalidArgument as error:
        raise doc.error((*where, "max_time_limit"), str(error).partition(": ")[2] or str(error)) from None
    if seconds <= 0:
        raise doc.error((*where, "max_time_limit"), "must be a duration > 0, e.g. 2h or 1-00:00:00")
    return seconds


def _flag(doc: Located, where: Path, body: dict[Any, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise doc.error((*where, key), "must be true or false")
    return value


def _weight(doc: Located, where: Path, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise doc.error(where, f"{value!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise doc.error(where, f"{value!r} must be > 0")
    return float(value)


def _children(doc: Located, where: Path, body: dict[Any, Any], path: str) -> tuple[QueueNode, ...]:
    queues = body.get("queues")
    if queues is None:
        return ()
    if not isinstance(queues, dict) or not queues:
        raise doc.error(where, "must be a non-empty mapping of child queues")
    children = []
    for name in queues:
        child, parent = _queue(doc, (*where, name), str(name), f"{path}.{name}")
        if parent is not None:
            raise doc.error((*where, name, "parent"), "a nested queue already has its parent")
        children.append(child)
    return tuple(children)


def _adopt(doc: Located, root: QueueNode, adopted: list[tuple[str, QueueNode, Path]]) -> QueueNode:
    """Moves `parent:` queues under their parents, refusing unknown parents and cycles."""
    waiting = list(adopted)
    while waiting:
        paths = {n.path for n in QueueTree(root).walk()}
        ready = [item for item in waiting if item[0] in paths]
        if not ready:
            raise _stuck(doc, waiting)
        for parent, node, where in ready:
            root = _attach(doc, root, parent, node, where)
        waiting = [item for item in waiting if item not in ready]
    return root


def _stuck(doc: Located, waiting: list[tuple[str, QueueNode, Path]]) -> YamlConfigError:
    parent_of = {node.name: parent.split(".")[0] for parent, node, _ in waiting}
    for parent, node, where in waiting:
        if parent.split(".")[0] not in parent_of:
            return doc.error(where, f"unknown parent queue {parent!r}")
    # Every parent is itself waiting for a parent: following them must come back round.
    chain = [waiting[0][1].name]
    while parent_of[chain[-1]] not in chain:
        chain.append(parent_of[chain[-1]])
    chain.append(parent_of[chain[-1]])
    return doc.error(waiting[0][2], f"the parents form a cycle: {' -> '.join(chain)}")


def _attach(doc: Located, node: QueueNode, parent: str, child: QueueNode, where: Path) -> QueueNode:
    if node.path == parent:
        path = f"{parent}.{child.name}" if parent else child.name
        if any(c.name == child.name for c in node.children):
            raise doc.error(where, f"duplicate queue {path!r}")
        return _replace_children(node, (*node.children, _rebase(child, path)))
    if node.path and not parent.startswith(node.path + "."):
        return node
    return _replace_children(node, tuple(_attach(doc, c, parent, child, where) for c in node.children))


def _rebase(node: QueueNode, path: str) -> QueueNode:
    children = tuple(_rebase(c, f"{path}.{c.name}") for c in node.children)
    return replace(node, path=path, children=children)


def _replace_children(node: QueueNode, children: tuple[QueueNode, ...]) -> QueueNode:
    return replace(node, children=children)
