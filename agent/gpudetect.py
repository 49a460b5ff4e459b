"""Finding the GPUs an agent offers, the I/O side of agent/gpus.py: through NVML
(`nvidia-ml-py`, an optional dependency: without it, or without a driver, there are no
GPUs, said once in the log), or from the device nodes the operator declares with
`--gpu-devices` (hosts without NVML, and the tests, which make their own nodes with mknod).

Also the per-device usage NVML reports (utilization and memory used), which the agent
attributes to the task each device is bound to: a device belongs to one task at a time."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from typing import Any

from tcluster.agent.gpus import Gpu, Selection, select
from tcluster.agent.runtime.devices import CONTROL_NODES
from tcluster.domain.errors import InvalidArgument

log = logging.getLogger(__name__)
DEV_DIR = "/dev"               # where NVML's devices have their nodes (/dev/nvidia<minor>)


@dataclass(frozen=True)
class GpuInventory:
    devices: tuple[Gpu, ...] = ()
    shared: tuple[tuple[int, int], ...] = ()   # control nodes every GPU task may open (major, minor)
    shared_paths: tuple[str, ...] = ()
    source: str = ""                           # "nvml", "declared" or "" (none)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.devices)

    def by_index(self, indices: tuple[int, ...]) -> tuple[Gpu, ...]:
        known = {g.index: g for g in self.devices}
        return tuple(known[i] for i in indices if i in known)


def char_device(path: str, flag: str = "--gpu-devices") -> tuple[int, int]:
    try:
        info = os.stat(path)
    except OSError as e:
        raise InvalidArgument(flag, f"{path}: {e.strerror}") from None
    if not stat.S_ISCHR(info.st_mode):
        raise InvalidArgument(flag, f"{path} is not a character device")
    return os.major(info.st_rdev), os.minor(info.st_rdev)


def declared(paths: str) -> tuple[Gpu, ...]:
    """`--gpu-devices /dev/nvidia0,/dev/nvidia1`: index i is the i-th path."""
    found = []
    for index, path in enumerate(p.strip() for p in paths.split(",") if p.strip()):
        major, minor = char_device(path)
        found.append(Gpu(index, path, major, minor))
    return tuple(found)


def control_nodes() -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """The shared NVIDIA control nodes present on this host."""
    nums, paths = [], []
    for name in CONTROL_NODES:
        path = os.path.join(DEV_DIR, os.path.basename(name))
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            nums.append((os.major(info.st_rdev), os.minor(info.st_rdev)))
            paths.append(path)
    return tuple(nums), tuple(paths)


def _nvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        log.info("no GPUs detected: nvidia-ml-py is not installed (pip install nvidia-ml-py, "
                 "or declare devices with --gpu-devices)")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as error:    # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        log.info("no GPUs detected: NVML cannot start (%s)", error)
        return None
    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_devices() -> tuple[Gpu, ...]:
    """Every GPU NVML sees, with its model, memory and device node (/dev/nvidia<minor>)."""
    nvml = _nvml()
    if nvml is None:
        return ()
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        minor = nvml.nvmlDeviceGetMinorNumber(handle)
        path = os.path.join(DEV_DIR, f"nvidia{minor}")
        try:
            major, minor = char_device(path)
        except InvalidArgument as error:
            log.warning("GPU %d skipped: %s", index, error)
            continue
        found.append(Gpu(index, path, major, minor, _text(nvml.nvmlDeviceGetName(handle)),
                         int(nvml.nvmlDeviceGetMemoryInfo(handle).total), _text(nvml.nvmlDeviceGetUUID(handle))))
    return tuple(found)


def inventory(selection: Selection, device_paths: str = "") -> GpuInventory:
    """What the agent offers through the selection (the agent's default is `all`): of the
    declared devices, or of those NVML finds. `--gpus 0` offers none and asks NVML nothing."""
    if selection == Selection():
        return GpuInventory()
    if device_paths:
        devices, source = select(selection, declared(device_paths)), "declared"
    else:
        devices, source = select(selection, nvml_devices()), "nvml"
    shared, paths = control_nodes() if devices else ((), ())
    return GpuInventory(devices, shared, paths, source if devices else "")


@dataclass(frozen=True)
class DeviceUsage:
    index: int
    util_percent: float
    memory_used_bytes: int
    memory_total_bytes: int


class NvmlUsage:
    """Reads each offered device's utilization and memory once per heartbeat. Absent NVML
    (declared devices, no driver): `sample` returns nothing, never zeros."""

    def __init__(self, inventory: GpuInventory) -> None:
        self._nvml = _nvml() if inventory.source == "nvml" else None
        self._indices = inventory.indices

    def sample(self) -> dict[int, DeviceUsage]:
        if self._nvml is None:
            return {}
        out = {}
        for index in self._indices:
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as error:       # a device fell off the bus, a driver reload
                log.debug("NVML sample of GPU %d failed: %s", index, error)
                continue
            out[index] = DeviceUsage(index, float(util.gpu), int(memory.used), int(memory.total))
        return out
