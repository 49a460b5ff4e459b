"""GPU detection and usage through NVML, with a fake `pynvml` module (no GPU here): the
inventory and its labels, NVML absent (no GPUs, said once), the per-device samples a
task's heartbeat carries, and their way to `tcl status -o json` and /metrics."""

from __future__ import annotations

import logging
import os
import stat
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from tcluster.agent import gpudetect
from tcluster.agent.codec import heartbeat_to_pb
from tcluster.agent.gpus import Selection, node_labels
from tcluster.agent.outbox import Outbox
from tcluster.agent.settings import AgentSettings
from tcluster.agent.taskstate import LaunchAsked
from tcluster.agent.tasks import TaskManager
from tcluster.cli.replies import reply_job_json
from tcluster.domain.gpuusage import GpuBoard, GpuSample
from tcluster.domain.launch import Launch
from tcluster.master.edge.agent_codec import inbound_from_pb
from tcluster.master.usage.metrics import MasterCollector
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.views.render import task_json
from tcluster.wire.protobuf import job_to_pb

GIB = 2**30


def fake_nvml(count: int = 2) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMinorNumber = lambda h: h  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(  # type: ignore[attr-defined]
        total=80 * GIB, used=(h + 1) * GIB)
    nvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=40 + h, memory=5)  # type: ignore[attr-defined]
    return nvml


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root to mknod the fake device nodes")
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        os.mknod(tmp_path / name, 0o600 | stat.S_IFCHR, os.makedev(3998, minor))
    monkeypatch.setattr(gpudetect, "DEV_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    return tmp_path


def test_nvml_inventory_and_labels(dev: Path) -> None:
    found = gpudetect.inventory(Selection(all=True))
    assert found.source == "nvml" and found.indices == (0, 1)
    assert [(g.path, g.major, g.minor) for g in found.devices] == [(str(dev / "nvidia0"), 3998, 0),
                                                                    (str(dev / "nvidia1"), 3998, 1)]
    assert found.shared == ((3998, 255),) and found.shared_paths == (str(dev / "nvidiactl"),)
    assert node_labels(found.devices) == {"gpu.count": "2", "gpu.model": "H100", "gpu.memory": "80Gi"}
    assert gpudetect.inventory(Selection(indices=(1,))).indices == (1,)
    assert gpudetect.inventory(Selection()).devices == ()


def test_without_nvml_there_are_no_gpus_and_it_is_said(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)          # import fails
    with caplog.at_level(logging.INFO):
        assert gpudetect.inventory(Selection(all=True)).devices == ()
    assert [r.message for r in caplog.records if "nvidia-ml-py is not installed" in r.message] != []


def test_samples_reach_the_status_json_and_metrics(dev: Path, tmp_path: Path) -> None:
    settings = AgentSettings(node="n1", cpus=4, memory_bytes=8 * GIB, state_dir=tmp_path / "state")
    manager = TaskManager(settings, SimpleNamespace(), Outbox(tmp_path / "outbox.jsonl"),
                          gpudetect.inventory(Selection(all=True)))
    assert manager.capacity.get("gpu") == 2
    spec = JobSpec(("x",), Resources.of({"cpu": 1, "memory": GIB, "gpu": 1}))
    launch = Launch("0123abcd.0", 1, "0123abcd", 0, spec)
    manager.state.handle(LaunchAsked(launch, 1.0))
    assert manager.sample_gpus() == ()                       # not started yet: nothing to say
    manager._started[launch.key] = SimpleNamespace()           # type: ignore[assignment]
    samples = manager.sample_gpus()
    assert samples == (GpuSample("0123abcd.0", 1, 0, 40.0, GIB, 80 * GIB),)

    beat = inbound_from_pb(heartbeat_to_pb(manager.free(), {}, 5.0, None, samples))
    assert beat.gpus == samples                                 # type: ignore[union-attr]
    board = GpuBoard()
    board.update("n1", beat.gpus)                               # type: ignore[union-attr]
    task = Task("0123abcd", 0, TaskState.RUNNING, node="n1", attempt=1, gpus=(0,))
    job = Job("0123abcd", spec, 1.0)
    shown = reply_job_json(job_to_pb(job, [task], gpu_usage=lambda t: board.of_task(t.node, t.id, t.attempt)))
    want = [{"gpu": 0, "util_percent": 40.0, "memory_used_bytes": GIB, "memory_total_bytes": 80 * GIB}]
    assert shown["tasks"][0]["gpus"] == [0] and shown["tasks"][0]["gpu_usage"] == want
    assert task_json(task, None, board.of_task("n1", task.id, 1))["gpu_usage"] == want
    assert "gpu_usage" not in task_json(task)                  # without NVML samples: absent, not zero

    families = {f.name: f for f in MasterCollector(SimpleNamespace(gpus=board), None)._gpus()}  # type: ignore[arg-type]
    assert set(families) == {"tcluster_task_gpu_utilization_ratio", "tcluster_task_gpu_memory_used_bytes",
                             "tcluster_task_gpu_memory_free_bytes"}        # DCGM's names only when asked
    own = families["tcluster_task_gpu_utilization_ratio"].samples[0]
    assert own.value == 0.4 and own.labels == {"gpu": "0", "node": "n1", "job_id": "0123abcd", "task": "0123abcd.0"}
    assert families["tcluster_task_gpu_memory_used_bytes"].samples[0].value == GIB
    assert families["tcluster_task_gpu_memory_free_bytes"].samples[0].value == 79 * GIB
    families = {f.name: f for f in MasterCollector(SimpleNamespace(gpus=board), None, True)._gpus()}  # type: ignore[arg-type]
    util = families["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert util.value == 40.0 and util.labels == {"gpu": "0", "Hostname": "n1", "job_id": "0123abcd",
                                                  "task": "0123abcd.0"}
    assert families["DCGM_FI_DEV_FB_USED"].samples[0].value == 1024.0       # MiB, as DCGM
    board.forget("n1")
    assert list(MasterCollector(SimpleNamespace(gpus=board), None)._gpus()) == []  # type: ignore[arg-type]
