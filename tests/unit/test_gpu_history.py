"""The GPU series of the usage history (master/usage/recorder.py, historydb.py): a row per
task and heartbeat from NVML's per-device samples, only of attempts that hold their
devices, persisted beside the task's series and dropped with its job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.domain.gpuusage import GpuSample
from tcluster.master.core.events import Now, Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.usage.history import GPU, HistoryConfig, Series
from tcluster.master.usage.historydb import HistoryStore
from tcluster.master.usage.recorder import Recorder
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState
from tcluster.domain.resources import Resources

GiB = 2**30


def _state() -> MasterState:
    spec = JobSpec(command=("x",), resources=Resources.of({"cpu": 1, "memory": GiB, "gpu": 2}), queue="ml")
    job = Job(id="j1", spec=spec, submitted_at=1.0)
    tasks = [Task("j1", 0, TaskState.RUNNING, node="g1", attempt=2, gpus=(0, 1)),
             Task("j1", 1, TaskState.PENDING, attempt=1)]
    node = Node("g1", Resources.of({"cpu": 8, "memory": 64 * GiB, "gpu": 4}))
    return MasterState([job], tasks, [node], [], Timeouts(), 0.0)


def _beat(rec: Recorder, t: float, util: tuple[float, float], attempt: int = 2) -> None:
    rec.on_gpus((GpuSample("j1.0", attempt, 0, util[0], 2 * GiB, 80 * GiB),
                 GpuSample("j1.0", attempt, 1, util[1], 6 * GiB, 80 * GiB),
                 GpuSample("j1.1", 1, 3, 99.0, GiB, 80 * GiB)), t)      # a task not running: left out


def test_a_task_gets_its_devices_mean_utilization_and_summed_memory() -> None:
    state, rec = _state(), Recorder(HistoryConfig(step_s=1.0))
    for i in range(4):
        _beat(rec, 100.0 + i, (20.0 + 10 * i, 60.0))
    _beat(rec, 104.0, (0.0, 0.0), attempt=1)                             # an older attempt's late sample
    rec.drain(state)
    assert set(rec.tasks) == {"j1.0"}
    data = rec.tasks["j1.0"].gpu.read(0, 1e9)
    assert data["t"] == [100.0, 101.0, 102.0, 103.0]
    assert data["gpu_util"] == [40.0, 45.0, 50.0, 55.0]                 # (20 + 10 i + 60) / 2
    assert data["gpu_memory_used"][-1] == 8 * GiB and data["gpu_memory_total"][-1] == 160 * GiB
    assert data["gpus"] == [2.0] * 4


def test_gpu_series_are_written_with_the_task_read_back_and_forgotten_with_the_job(tmp_path: Path) -> None:
    config = HistoryConfig(step_s=1.0)
    state, rec = _state(), Recorder(config)
    store = HistoryStore(tmp_path / "history.db", config)
    for i in range(10):
        _beat(rec, 100.0 + i, (50.0, 70.0))
    rec.drain(state)
    store.flush(rec)
    ended = Task("j1", 0, TaskState.SUCCEEDED, node="g1", attempt=2, finished_at=111.0, gpus=(0, 1))
    rec.on_step(AppliedStep(object(), Step(tasks={"j1.0": ended}), Now(111.0, 111.0)))
    rec.drain(state)
    store.flush(rec)
    assert "j1.0" not in rec.tasks                                       # on disk now, GPU series too
    back = store.load_task("j1.0")
    assert back is not None and back.gpu is not None
    assert back.gpu.read(0, 1e9)["gpu_util"] == [60.0] * 10
    again = Recorder(config)
    store.restore(again, set())
    assert again.nodes == {} and again.queues == {}                      # gpu: keys are no node or queue
    again.forgotten.add("j1")
    store.flush(again)
    assert store.load_task("j1.0") is None and store.load_series("gpu:j1.0", GPU) is None
    store.close()


def test_a_gpu_series_fits_a_small_budget_at_default_retention() -> None:
    series = Series(GPU, HistoryConfig())
    assert sum(t.nbytes() for t in series.tiers) <= 8 * 1024


@pytest.mark.parametrize("samples", [(), (GpuSample("nope.0", 1, 0, 1.0, 1, 2),)])
def test_nothing_or_unknown_tasks_make_no_records(samples: tuple[GpuSample, ...]) -> None:
    state, rec = _state(), Recorder(HistoryConfig())
    rec.on_gpus(samples, 10.0)
    rec.drain(state)
    assert rec.tasks == {}
