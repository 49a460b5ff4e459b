"""The GPUs an agent offers, pure: the `--gpus` selection, the devices as values, the node
labels they give, and which free devices a task is bound to.

Each device is one unit of the resource kind `gpu` in the node's capacity. The agent owns
its devices: the master only counts them, and the agent picks the indices of a launch
(`pick`) from those no live attempt holds. Detection (NVML, or the device nodes the
operator declares) is I/O and lives in agent/gpudetect.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from tcluster.domain.errors import InvalidArgument

GPU = "gpu"                        # the resource kind
MODEL_LABEL = "gpu.model"          # e.g. H100 (constraints: `gpu.model=H100`)
MEMORY_LABEL = "gpu.memory"        # per device, e.g. 80Gi
COUNT_LABEL = "gpu.count"
_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
_SERIES_WORDS = {"rtx", "gtx"}
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Gpu:
    """One device. `index` is the agent's name for it (CUDA_VISIBLE_DEVICES); `path`,
    `major`, `minor` the character device a task must be allowed to open."""
    index: int
    path: str
    major: int
    minor: int
    model: str = ""            # NVML's name, e.g. "NVIDIA H100 80GB HBM3"; "" when declared
    memory_bytes: int = 0      # 0 when unknown (declared)
    uuid: str = ""


@dataclass(frozen=True)
class Selection:
    """`--gpus`: every device (`all`), the first `count`, or these `indices`."""
    all: bool = False
    count: int = 0
    indices: tuple[int, ...] = ()


NONE = Selection()


def parse_selection(text: str | None, flag: str = "--gpus") -> Selection:
    """`all`, a count `N` (0 or `none`: none), or indices `0,2` (one index alone: `3,`)."""
    value = (text or "").strip().lower()
    if value in ("", "none", "0"):
        return NONE
    if value == "all":
        return Selection(all=True)
    if "," not in value:
        if not value.isdigit():
            raise InvalidArgument(flag, f"{text!r} is not all, a count or a list of indices (e.g. all, 2, 0,2)")
        return Selection(count=int(value))
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise InvalidArgument(flag, f"{text!r}: indices must be numbers separated by commas (e.g. 0,2)")
    indices = tuple(int(p) for p in parts)
    if len(set(indices)) != len(indices):
        raise InvalidArgument(flag, f"{text!r} names an index twice")
    return Selection(indices=tuple(sorted(indices)))


def select(selection: Selection, found: Iterable[Gpu], flag: str = "--gpus") -> tuple[Gpu, ...]:
    """The devices the selection names among those found, in index order."""
    devices = tuple(sorted(found, key=lambda g: g.index))
    if selection.all:
        return devices
    if selection.indices:
        by_index = {g.index: g for g in devices}
        missing = [i for i in selection.indices if i not in by_index]
        if missing:
            raise InvalidArgument(flag, f"no GPU with index {', '.join(map(str, missing))} on this host "
                                        f"(found {_found(devices)})")
        return tuple(by_index[i] for i in selection.indices)
    if selection.count > len(devices):
        raise InvalidArgument(flag, f"asks for {selection.count} GPUs; this host has {_found(devices)}")
    return devices[:selection.count]


def _found(devices: tuple[Gpu, ...]) -> str:
    return f"{len(devices)}: indices {', '.join(str(g.index) for g in devices)}" if devices else "none"


def banner(devices: tuple[Gpu, ...], source: str) -> str:
    """For the agent's start line: `, 1 GPU: index 0 H100 (nvml)` (bare `GPUs 0` read as none)."""
    if not devices:
        return ""
    models = sorted({short_model(g.model) for g in devices if g.model})
    what = f"{len(devices)} GPU{'s' if len(devices) > 1 else ''}: index{'es' if len(devices) > 1 else ''} "
    return f", {what}{','.join(str(g.index) for g in devices)}{' ' + '/'.join(models) if models else ''} ({source})"


def short_model(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; 'Tesla V100-SXM2-16GB' -> 'V100';
    'NVIDIA GeForce RTX 4090' -> 'RTX-4090'. A label value ('' when unknown)."""
    words = [w for w in name.split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return ""
    head = words[0].split("-")[0]
    if head.lower() in _SERIES_WORDS and len(words) > 1:
        head = f"{head}-{words[1].split('-')[0]}"
    return _LABEL_UNSAFE.sub("-", head)[:63].strip("-")


def node_labels(devices: tuple[Gpu, ...]) -> dict[str, str]:
    """gpu.model / gpu.memory (of the first device: a node's GPUs are usually alike) and
    gpu.count; only what is known."""
    if not devices:
        return {}
    first = devices[0]
    labels = {COUNT_LABEL: str(len(devices))}
    model = short_model(first.model)
    if model:
        labels[MODEL_LABEL] = model
    if first.memory_bytes > 0:
        labels[MEMORY_LABEL] = f"{round(first.memory_bytes / 2**30)}Gi"
    return labels


def pick(offered: tuple[int, ...], held: Iterable[int], count: int) -> tuple[int, ...] | None:
    """The lowest `count` offered indices no live attempt holds; None if too few are free."""
    taken = set(held)
    free = [i for i in sorted(offered) if i not in taken]
    if count > len(free):
        return None
    return tuple(free[:count])


def requested(amount: float) -> int:
    """Whole devices of a request's `gpu` amount (a fraction of a device is one device)."""
    whole = int(amount)
    return whole + (1 if amount > whole else 0)


def visible_env(indices: tuple[int, ...], node_has_gpus: bool) -> tuple[tuple[str, str], ...]:
    """The GPU variables of a task bound to the node's devices `indices`:

    - CUDA_VISIBLE_DEVICES: its devices as CUDA numbers them inside the task, 0..n-1. The
      cgroup lets the task open only its own devices, and CUDA enumerates only the devices
      it can open, from 0 (Slurm sets it so under ConstrainDevices for the same reason): the
      node's index 2 is the task's device 0, and CUDA_VISIBLE_DEVICES=2 would name none.
    - NVIDIA_VISIBLE_DEVICES and TCL_GPUS: the node's indices (what NVIDIA's container
      runtime reads; what nvidia-smi on the host calls them).
    On a GPU node a task without GPUs gets an empty CUDA list and `void` (NVIDIA's 'none')."""
    if indices:
        node = ",".join(map(str, indices))
        local = ",".join(str(i) for i in range(len(indices)))
        return (("CUDA_VISIBLE_DEVICES", local), ("NVIDIA_VISIBLE_DEVICES", node), ("TCL_GPUS", node))
    if node_has_gpus:
        return (("CUDA_VISIBLE_DEVICES", ""), ("NVIDIA_VISIBLE_DEVICES", "void"), ("TCL_GPUS", ""))
    return ()
