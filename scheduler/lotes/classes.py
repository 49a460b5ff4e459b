"""Job classes and machine configurations for LoTES.

Classes come from a classes file or are learned: k-means (Lloyd's algorithm, as the paper
does after Mishra et al., section 5.3.2) over the requests of a sliding window of submitted
tasks. A task's class is its nearest class mean. Configurations group nodes with identical
capacity, or by a node label the operator names.

Classes file (YAML):

    classes:
      - {name: small, request: {cpu: 1.28, memory: 2.5Gi}, share: 0.23}
      - {name: big, request: {cpu: 12.8, memory: 15Gi}, share: 0.01, speed: {c01: 2.0}}

`share` is the fraction of arrivals (normalized over the file); `speed` is mu_jk per
configuration name (default 1: the same rate everywhere)."""

from __future__ import annotations

import math
import random
from pathlib import Path as FsPath
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources, resources_from_mapping
from tcluster.scheduler.lotes.model import Configuration, JobClass
from tcluster.scheduler.nodestate import resource_vector
from tcluster.scheduler.yamlsrc import Located, Path, format_path, load_located, read_config_file

DEFAULT_CLASSES = 4          # the paper finds four enough for the Google trace
_CLASS_KEYS = ("name", "request", "share", "speed")


def kmeans(points: np.ndarray, k: int, rng: random.Random, iterations: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's algorithm with k-means++ seeding from `rng`. points (n, L), already on a
    common scale. Returns (centroids (k', L), label per point); k' <= k when there are
    fewer distinct points. Deterministic for a seed."""
    distinct = np.unique(points, axis=0)
    k = max(1, min(k, len(distinct)))
    centroids = _seed(points, k, rng)
    labels = np.zeros(len(points), dtype=np.int64)
    for _ in range(iterations):
        distance = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        new_labels = distance.argmin(axis=1)
        moved = [points[new_labels == c].mean(axis=0) if np.any(new_labels == c) else centroids[c] for c in range(k)]
        centroids = np.array(moved)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
    order = np.lexsort(centroids.T[::-1])   # a stable class numbering: by mean request
    relabel = np.empty(k, dtype=np.int64)
    relabel[order] = np.arange(k)
    return centroids[order], relabel[labels]


def _seed(points: np.ndarray, k: int, rng: random.Random) -> np.ndarray:
    chosen = [points[rng.randrange(len(points))]]
    for _ in range(1, k):
        distance = np.min(((points[:, None, :] - np.array(chosen)[None]) ** 2).sum(axis=2), axis=1)
        total = float(distance.sum())
        if total <= 0:
            break
        u, acc = rng.random() * total, 0.0
        pick = len(points) - 1
        for i, d in enumerate(distance.tolist()):
            acc += d
            if acc >= u and d > 0:
                pick = i
                break
        chosen.append(points[pick])
    return np.array(chosen, dtype=float)


def learn_classes(requests: Sequence[np.ndarray], scale: np.ndarray, k: int, rng: random.Random) -> tuple[JobClass, ...]:
    """Classes from a window of task requests (vectors in the cluster's kinds and units)."""
    if not requests:
        return ()
    points = np.array(requests, dtype=float) / scale
    centroids, labels = kmeans(points, k, rng)
    shares = np.bincount(labels, minlength=len(centroids)) / len(points)
    return tuple(JobClass(f"k{i + 1}", tuple((centroids[i] * scale).tolist()), float(shares[i]))
                 for i in range(len(centroids)))


class ClassWindow:
    """The requests of the last `size` submitted tasks, for learning classes and for
    measuring drift. Owned by the master; a job of N tasks adds its request N times
    (capped, so one huge job does not fill the window alone)."""

    def __init__(self, size: int = 10_000, per_job: int = 100) -> None:
        from collections import deque
        self._requests: deque[np.ndarray] = deque(maxlen=size)
        self.per_job = per_job

    def add(self, request: np.ndarray, tasks: int = 1) -> None:
        for _ in range(min(tasks, self.per_job)):
            self._requests.append(request)

    def requests(self) -> list[np.ndarray]:
        return list(self._requests)

    def shares(self, means: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """The observed class proportions in the window (nearest class mean)."""
        labels = (classify(r[: means.shape[1]], means, scale[: means.shape[1]]) for r in self._requests)
        return observed_shares(labels, len(means))


def classify(request: np.ndarray, means: np.ndarray, scale: np.ndarray) -> int:
    """The nearest class mean (normalized Euclidean distance); ties go to the lower class."""
    return int((((means - request) / scale) ** 2).sum(axis=1).argmin())


def observed_shares(labels: Iterable[int], classes: int) -> np.ndarray:
    counts = np.bincount(np.fromiter(labels, dtype=np.int64), minlength=classes)[:classes]
    return counts / counts.sum() if counts.sum() else np.zeros(classes)


def drift(planned: np.ndarray, observed: np.ndarray) -> float:
    """Total variation distance between the planned and the observed class proportions."""
    return float(0.5 * np.abs(np.asarray(planned) - np.asarray(observed)).sum())


def group_configurations(nodes: Iterable[tuple[str, Resources, Mapping[str, str]]], kinds: Sequence[str],
                         label: str | None = None) -> tuple[Configuration, ...]:
    """Nodes grouped by identical capacity (or by the value of `label`; a group's capacity is
    then its smallest machine's, per kind, so a bin fits every member). Ordered as Table 1:
    most machines first, then larger machines; names are c01, c02, ... or the label value."""
    groups: dict[Any, list[tuple[str, tuple[float, ...]]]] = {}
    for name, capacity, labels in nodes:
        vector = tuple(resource_vector(capacity, kinds).tolist())
        key = labels.get(label, "") if label else vector
        groups.setdefault(key, []).append((name, vector))
    made = []
    for key, members in groups.items():
        smallest = tuple(np.min(np.array([v for _, v in members]), axis=0).tolist())
        made.append((key, smallest, tuple(sorted(n for n, _ in members))))
    made.sort(key=lambda g: (-len(g[2]), tuple(-x for x in g[1]), g[2][0]))
    width = max(2, len(str(len(made))))
    return tuple(Configuration(str(key) if label else f"c{i + 1:0{width}d}", cap, len(names), names)
                 for i, (key, cap, names) in enumerate(made))


def load_classes(path: FsPath | str, kinds: Sequence[str]) -> tuple[JobClass, ...]:
    return parse_classes(read_config_file(path, "the classes file"), str(path), kinds)


def parse_classes(text: str, source: str, kinds: Sequence[str]) -> tuple[JobClass, ...]:
    doc = load_located(text, source)
    if not isinstance(doc.value, dict) or set(doc.value) != {"classes"}:
        raise doc.error((), "a classes file is a mapping with one key, `classes`, a list of classes")
    raw = doc.value["classes"]
    if not isinstance(raw, list) or not raw:
        raise doc.error(("classes",), "must be a non-empty list of {name, request, share, speed}")
    classes, seen = [], set()
    for i, body in enumerate(raw):
        job_class = _parse_class(doc, ("classes", i), body, kinds)
        if job_class.name in seen:
            raise doc.error(("classes", i, "name"), f"duplicate class name {job_class.name!r}")
        seen.add(job_class.name)
        classes.append(job_class)
    return tuple(classes)


def _parse_class(doc: Located, path: Path, body: Any, kinds: Sequence[str]) -> JobClass:
    if not isinstance(body, dict):
        raise doc.error(path, f"must be a mapping with {', '.join(_CLASS_KEYS)}")
    for key in body:
        if key not in _CLASS_KEYS:
            raise doc.error((*path, key), f"unknown key; a class has {', '.join(_CLASS_KEYS)}")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise doc.error((*path, "name"), "every class needs a `name`")
    request = body.get("request")
    if not isinstance(request, dict) or not request:
        raise doc.error((*path, "request"), "must be a mapping like {cpu: 2, memory: 4Gi}")
    try:
        resources = resources_from_mapping(request, format_path((*path, "request")))
    except InvalidArgument as exc:
        raise doc.error((*path, "request"), str(exc)) from None
    share = _positive(doc, (*path, "share"), body.get("share"))
    speed = body.get("speed", {})
    if not isinstance(speed, dict):
        raise doc.error((*path, "speed"), "must be a mapping of configuration name to rate")
    rates = {str(c): _positive(doc, (*path, "speed", c), v, allow_zero=True) for c, v in speed.items()}
    return JobClass(name, tuple(resource_vector(resources, kinds).tolist()), share, rates)


def _positive(doc: Located, path: Path, value: Any, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise doc.error(path, f"{value!r} is not a number")
    if value < 0 or (value == 0 and not allow_zero):
        raise doc.error(path, f"{value!r} must be {'>=' if allow_zero else '>'} 0")
    return float(value)
