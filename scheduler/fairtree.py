"""The queue tree as index arrays, shared by `hdrf` and `mch`.

Index 0 is the root; every node's index is larger than its parent's, so walking the
indices downwards visits children before parents. A job whose queue is not in the tree
(the file was reloaded without it, or the master restarted with another file) is not
dropped: it gets a queue of its own right under the root, weight 1.

A leaf that shares by users (`share: users`, scheduler/usershare.py) gets one child per
user, weight 1, made when a job of that user first shows up: `user_of[node]` names it."""

from __future__ import annotations

from tcluster.scheduler.queues import QueueTree, default_tree


class QueueIndex:
    def __init__(self, tree: QueueTree | None) -> None:
        tree = tree or default_tree()
        self.tree = tree
        self.user_of: dict[int, tuple[str, str]] = {}   # a user node -> (leaf path, user)
        self.paths: list[str] = []
        self.parent: list[int] = []
        self.weight: list[float] = []
        self.children: list[list[int]] = []
        self.subqueues: list[list[int]] = []             # children that are queues, not users
        self._by_path: dict[str, int] = {}
        stack: list[tuple[int, object]] = [(-1, tree.root)]
        while stack:
            parent, node = stack.pop()
            index = self._add(node.path, parent, node.weight)  # type: ignore[attr-defined]
            stack.extend((index, child) for child in reversed(node.children))  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.paths)

    def _add(self, path: str, parent: int, weight: float, user: bool = False) -> int:
        index = len(self.paths)
        self.paths.append(path)
        self.parent.append(parent)
        self.weight.append(weight)
        self.children.append([])
        self.subqueues.append([])
        if parent >= 0:
            self.children[parent].append(index)
            if not user:
                self.subqueues[parent].append(index)
        self._by_path[path] = index
        return index

    def locate(self, path: str) -> int:
        """The node a job of queue `path` hangs off (created under the root if unknown)."""
        path = path or "?"
        index = self._by_path.get(path)
        return self._add(path, 0, 1.0) if index is None else index

    def locate_job(self, queue: str, user: str) -> int:
        """The node a job of `user` in queue `queue` hangs off: the user's node under a
        leaf that shares by users, else the queue's own node."""
        leaf = self.locate(queue)
        if not user or not self.tree.shares_users(queue):
            return leaf
        path = f"{self.paths[leaf]}/{user}"    # no queue name holds a "/"
        index = self._by_path.get(path)
        if index is None:
            index = self._add(path, leaf, self.tree.user_weight(queue, user), user=True)
            self.user_of[index] = (queue, user)
        return index

    def ancestors(self, index: int) -> list[int]:
        """From `index` up to, not including, the root."""
        chain = []
        while index > 0:
            chain.append(index)
            index = self.parent[index]
        return chain
