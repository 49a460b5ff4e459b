"""GPU scheduling through the in-process master and agents (fake runtime): the labels an
agent derives from its GPUs take constraints (`gpu.model=H100`), each task is bound to
devices of its own, a request no node can hold is refused at submit, one that cannot fit
now waits and runs when a binding is released (a cancel)."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest

from tcluster.agent.gpudetect import GpuInventory
from tcluster.agent.gpus import Gpu
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run
from tests.component.test_gpu_history import fake_nvml

GiB = 2**30
RUNNING = common_pb2.TASK_RUNNING


def inventory(model: str, memory: int) -> GpuInventory:
    return GpuInventory(tuple(Gpu(i, f"/dev/nvidia{i}", 195, i, model, memory) for i in (0, 1)), source="nvml")


def test_constraints_on_gpu_labels_place_and_bind_whole_devices(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())

    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("h1", gpus=inventory("NVIDIA H100 80GB HBM3", 80 * GiB))
        await h.add_agent("a1", gpus=inventory("NVIDIA A100-SXM4-40GB", 40 * GiB))
        nodes = {n.name: n for n in (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())).nodes}
        assert nodes["h1"].labels["gpu.model"] == "H100" and nodes["h1"].labels["gpu.memory"] == "80Gi"
        assert nodes["a1"].labels["gpu.model"] == "A100" and nodes["a1"].labels["gpu.memory"] == "40Gi"
        assert nodes["h1"].capacity.other["gpu"] == 2

        h100 = await h.submit(["sleep", "1000"], cpu=0.5, tasks=2, gpus=1, constraints=["gpu.model=H100"])
        a100 = await h.submit(["sleep", "1000"], cpu=0.5, gpus=2, constraints=["gpu.model=A100"])
        placed = await h.wait_job(h100.id, lambda j: all(t.state == RUNNING and t.gpus for t in j.tasks))
        assert [t.node for t in placed.tasks] == ["h1", "h1"]
        assert sorted(g for t in placed.tasks for g in t.gpus) == [0, 1]          # one device each
        other = await h.wait_job(a100.id, lambda j: j.tasks[0].state == RUNNING and len(j.tasks[0].gpus) == 2)
        assert other.tasks[0].node == "a1"

        with pytest.raises(grpc.aio.AioRpcError) as refused:                     # no node has 3
            await h.submit(["x"], cpu=0.5, gpus=3)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "gpu" in refused.value.details()

        waiting = await h.submit(["sleep", "1000"], cpu=0.5, gpus=1, constraints=["gpu.model=H100"])
        pending = await h.wait_job(waiting.id, lambda j: bool(j.pending_reason))
        assert pending.tasks[0].state == common_pb2.TASK_PENDING and "gpu" in pending.pending_reason, pending
        await h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=h100.id))                   # its devices are released
        later = await h.wait_job(waiting.id, lambda j: j.tasks[0].state == RUNNING and bool(j.tasks[0].gpus))
        assert later.tasks[0].node == "h1" and len(later.tasks[0].gpus) == 1
    run(scenario, tmp_path)
