"""The /metrics collector and per-task renderer over a state built in memory: names, types,
labels (escaped), values, the never-reset OOM counter, the histogram, and the flag."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from tcluster.master.core.events import Now, Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.usage.history import HistoryConfig
from tcluster.master.usage.metrics import Exposition
from tcluster.master.usage.recorder import Recorder
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.views.queuerow import QueueRow

GiB = 2**30


def _service() -> SimpleNamespace:
    spec = JobSpec(command=("x",), resources=Resources.of({"cpu": 0.5, "memory": GiB}), name="train",
                   queue="ads.prod", user='we"ird\\user', cpu_limit=1.0)
    job = Job(id="0000abcd", spec=spec, submitted_at=1.0)
    tasks = [Task("0000abcd", i, TaskState.RUNNING, node="n1", attempt=1) for i in range(2)]
    state = MasterState([job], tasks, [Node("n1", Resources.of({"cpu": 4, "memory": 8 * GiB}))], [],
                        Timeouts(), 0.0)
    state.usage["0000abcd.0"] = TaskUsage(cpu_seconds=12.5, memory_bytes=300 * 2**20, memory_file_bytes=100 * 2**20,
                                          memory_anon_bytes=190 * 2**20, pids=7, cpu_throttled_seconds=0.25)
    state.usage["0000abcd.1"] = TaskUsage(cpu_seconds=3.0)
    row = QueueRow("ads.prod", "prod", "ads", 2, True, 1.0, 0.6, 0.125, Resources(), 2, 0, 1, 0)
    return SimpleNamespace(state=state, list_queues=lambda: [row])


def _families(text: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def test_task_series_carry_cadvisor_like_names_units_and_labels() -> None:
    recorder = Recorder(HistoryConfig())
    recorder.oom_kills[("n1", "ads.prod")] = 3
    recorder.on_round(0.002, 2)
    families = _families(Exposition(_service(), recorder).render())
    cpu = families["tcluster_task_cpu_usage_seconds"]
    assert cpu.type == "counter"
    [first] = [s for s in cpu.samples if s.labels["task"] == "0"]
    assert first.name == "tcluster_task_cpu_usage_seconds_total" and first.value == 12.5
    assert first.labels == {"job_id": "0000abcd", "job_name": "train", "task": "0", "node": "n1",
                            "queue": "ads.prod", "user": 'we"ird\\user'}
    value = {name: next(s.value for s in families[name].samples if s.labels.get("task") == "0") for name in (
        "tcluster_task_memory_working_set_bytes", "tcluster_task_memory_rss_bytes", "tcluster_task_memory_cache_bytes",
        "tcluster_task_memory_limit_bytes", "tcluster_task_pids", "tcluster_task_cpu_throttled_seconds",
        "tcluster_task_cpu_request_cores")}
    assert value == {"tcluster_task_memory_working_set_bytes": 200 * 2**20,
                     "tcluster_task_memory_rss_bytes": 190 * 2**20, "tcluster_task_memory_cache_bytes": 100 * 2**20,
                     "tcluster_task_memory_limit_bytes": GiB, "tcluster_task_pids": 7,
                     "tcluster_task_cpu_throttled_seconds": 0.25, "tcluster_task_cpu_request_cores": 0.5}
    assert [s.value for s in families["tcluster_oom_kills"].samples if s.name.endswith("_total")] == [3]
    assert [s.value for s in families["tcluster_node_cpu_allocated_cores"].samples] == [1.0]
    assert [s.value for s in families["tcluster_queue_guaranteed_share"].samples] == [0.6]
    histogram = families["tcluster_scheduler_round_duration_seconds"]
    count = next(s.value for s in histogram.samples if s.name.endswith("_count"))
    assert histogram.type == "histogram" and count == 1
    assert next(s.value for s in families["tcluster_scheduler_placements"].samples) == 2


def test_a_task_that_moves_node_gets_new_labels_and_the_flag_drops_task_series() -> None:
    service, recorder = _service(), Recorder(HistoryConfig())
    exposition = Exposition(service, recorder)
    exposition.render()
    first = exposition._text
    exposition.render()
    assert exposition._text is first                     # nothing happened since: the same bytes (but process_*)
    moved = Task("0000abcd", 0, TaskState.RUNNING, node="n2", attempt=2)
    service.state.tasks["0000abcd"][0] = moved           # as a step applies it, and the recorder hears
    recorder.on_step(AppliedStep(object(), Step(tasks={moved.id: moved}), Now(5.0, 5.0)))
    nodes = {s.labels["node"] for s in _families(exposition.render())["tcluster_task_pids"].samples}
    assert nodes == {"n1", "n2"}
    quiet = Exposition(service, Recorder(HistoryConfig()), task_metrics=False).render().decode()
    assert "tcluster_task_" not in quiet and "tcluster_node_up" in quiet
