"""`tcl top` over a fake client: sorting, requested vs used, the JSON snapshot, the views."""

from __future__ import annotations

import argparse
import io
import json

from tcluster.cli.main import build_parser
from tcluster.cli.top import render, snapshot, top
from tcluster.v1 import common_pb2, jobs_pb2

MiB = 2**20


class FakeClient:
    def __init__(self) -> None:
        burn = jobs_pb2.Job(id="aaaa0001", spec=jobs_pb2.JobSpec(name="burn", queue="ads.prod"))
        burn.spec.resources.cpu, burn.spec.resources.memory = 1, 512 * MiB
        for index, (rate, memory) in enumerate([(0.1, 300 * MiB), (0.95, 50 * MiB)]):
            task = burn.tasks.add(index=index, state=common_pb2.TASK_RUNNING, node="n1")
            task.usage.cpu_rate, task.usage.memory_bytes, task.usage.memory_file_bytes = rate, memory, 10 * MiB
        burn.tasks.add(index=2, state=common_pb2.TASK_PENDING)
        self.jobs = [burn]

    def list_jobs(self, states: list[int], queue: str, limit: int, all_jobs: bool = False,
                  watch_usage_s: float = 0.0) -> tuple[list, int]:
        return self.jobs, len(self.jobs)

    def list_nodes(self) -> list[jobs_pb2.Node]:
        node = jobs_pb2.Node(name="n1", state="READY", tasks=["aaaa0001.0", "aaaa0001.1"])
        node.capacity.cpu, node.capacity.memory, node.free.cpu, node.free.memory = 4, 8 * 2**30, 2, 7 * 2**30
        return [node]

    def list_queues(self) -> jobs_pb2.ListQueuesResponse:
        return jobs_pb2.ListQueuesResponse(queues=[
            jobs_pb2.Queue(path="ads", depth=1, guaranteed_share=0.6, dominant_share=0.5, running_tasks=2),
            jobs_pb2.Queue(path="ads.prod", depth=2, guaranteed_share=0.54, dominant_share=0.5, running_tasks=2),
            jobs_pb2.Queue(path="dev", depth=1, guaranteed_share=0.4)])


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["top", *argv])


def test_the_busiest_task_is_first_and_shows_used_against_requested() -> None:
    kind, rows = snapshot(_args(), FakeClient())
    assert kind == "tasks" and [r["task"] for r in rows] == [1, 0]     # pending tasks are not shown
    screen = render(kind, rows, 0).splitlines()
    assert screen[0].split()[:6] == ["JOB", "NAME", "TASK", "NODE", "CPU", "/REQ"]
    assert screen[1].split()[:7] == ["aaaa0001", "burn", "1", "n1", "0.95", "1", "95%"]
    _, by_memory = snapshot(_args("--sort", "memory"), FakeClient())
    assert by_memory[0]["task"] == 0 and by_memory[0]["memory_working_set_bytes"] == 290 * MiB


def test_nodes_and_queues_views_sum_their_tasks() -> None:
    _, nodes = snapshot(_args("--nodes"), FakeClient())
    assert nodes[0]["cpu_used"] == 1.05 and nodes[0]["cpu_allocated"] == 2 and nodes[0]["tasks"] == 2
    _, queues = snapshot(_args("--queues"), FakeClient())
    assert [q["path"] for q in queues] == ["ads", "ads.prod", "dev"] and queues[2]["cpu_used"] == 0
    assert "GUARANTEED" in render("queues", queues, 0)


def test_json_prints_one_snapshot_and_once_draws_one_screen() -> None:
    out = io.StringIO()
    assert top(_args("-o", "json"), FakeClient(), out=out) == 0
    assert [r["task"] for r in json.loads(out.getvalue())["tasks"]] == [1, 0]
    out = io.StringIO()
    assert top(_args("--once"), FakeClient(), sleep=lambda s: None, out=out) == 0
    assert "sorted by cpu" in out.getvalue() and "\x1b[2J" not in out.getvalue()


def test_top_shows_network_rates_against_the_request() -> None:
    from tcluster.cli.top import render
    row = {"job_id": "0123abcd", "name": "", "task": 0, "node": "n1", "cpu_rate": 0.5, "cpu_request": 1.0,
           "memory_working_set_bytes": 2**20, "memory_limit_bytes": 2**26, "pids": 3,
           "net_tx_rate": 19.2e6, "net_request": 20e6}
    table = render("tasks", [row], 10)
    assert "NET TX" in table.splitlines()[0] and "19.2Mbit" in table and "20.0Mbit" in table


class GpuClient(FakeClient):
    """One two-GPU task measured by NVML, one one-GPU task not yet sampled, one CPU task."""

    def __init__(self) -> None:
        super().__init__()
        train = jobs_pb2.Job(id="bbbb0002", spec=jobs_pb2.JobSpec(name="train", queue="ml"))
        train.spec.resources.cpu, train.spec.resources.memory = 2, 4 * 2**30
        train.spec.resources.other["gpu"] = 2
        busy = train.tasks.add(index=0, state=common_pb2.TASK_RUNNING, node="g1", gpus=[1, 3])
        for index, util, used in ((1, 90.0, 6 * 2**30), (3, 50.0, 2 * 2**30)):
            busy.gpu_usage.add(index=index, util_percent=util, memory_used_bytes=used, memory_total_bytes=80 * 2**30)
        train.tasks.add(index=1, state=common_pb2.TASK_RUNNING, node="g1", gpus=[0])
        self.jobs = [*self.jobs, train]

    def list_nodes(self) -> list[jobs_pb2.Node]:
        node = jobs_pb2.Node(name="g1", state="READY", tasks=["bbbb0002.0", "bbbb0002.1"])
        node.capacity.cpu, node.capacity.memory, node.free.cpu, node.free.memory = 8, 64 * 2**30, 4, 56 * 2**30
        node.capacity.other["gpu"], node.free.other["gpu"] = 4, 1
        return [*super().list_nodes(), node]

    def list_queues(self) -> jobs_pb2.ListQueuesResponse:
        reply = super().list_queues()
        reply.queues.add(path="ml", depth=1, guaranteed_share=0.5, dominant_share=0.75, running_tasks=2)
        return reply


def test_gpu_columns_show_each_tasks_devices_utilization_and_memory() -> None:
    kind, rows = snapshot(_args("--sort", "gpu"), GpuClient())
    busy = rows[0]
    assert (busy["job_id"], busy["task"], busy["gpus"]) == ("bbbb0002", 0, [1, 3])
    assert busy["gpu_util_percent"] == 70.0 and busy["gpu_memory_used_bytes"] == 8 * 2**30   # mean of 90, 50; summed
    unsampled = next(r for r in rows if r["job_id"] == "bbbb0002" and r["task"] == 1)
    assert unsampled["gpus"] == [0] and unsampled["gpu_util_percent"] is None
    cpu_only = next(r for r in rows if r["job_id"] == "aaaa0001")
    assert cpu_only["gpus"] == [] and cpu_only["gpu_memory_used_bytes"] is None
    lines = render(kind, rows, 0).splitlines()
    assert lines[0].split()[-4:] == ["GPUS", "GPU%", "GPU", "MEM"]
    cells = {(line.split()[0], line.split()[2]): line.split()[-3:] for line in lines[1:]}
    assert cells[("bbbb0002", "0")] == ["1,3", "70%", "8192Mi"]
    assert cells[("bbbb0002", "1")] == ["0", "-", "-"] and cells[("aaaa0001", "1")] == ["-", "-", "-"]


def test_gpu_columns_are_left_out_where_no_task_holds_a_gpu() -> None:
    kind, rows = snapshot(_args(), FakeClient())
    assert "GPU" not in render(kind, rows, 0) and all(r["gpus"] == [] for r in rows)
    _, nodes = snapshot(_args("--nodes"), FakeClient())
    assert "GPU" not in render("nodes", nodes, 0)


def test_nodes_show_gpus_allocated_of_capacity_and_json_carries_the_gpu_figures() -> None:
    _, nodes = snapshot(_args("--nodes", "--sort", "gpu"), GpuClient())
    g1 = nodes[0]
    assert (g1["name"], g1["gpu_allocated"], g1["gpu_capacity"], g1["gpu_memory_used_bytes"]) == ("g1", 3, 4, 8 * 2**30)
    lines = render("nodes", nodes, 0).splitlines()
    assert lines[0].split()[-3:] == ["GPUS", "GPU", "MEM"]
    assert lines[1].split()[-2:] == ["3/4", "8192Mi"] and lines[2].split()[-2:] == ["-", "-"]   # n1 has none
    _, queues = snapshot(_args("--queues", "--sort", "gpu"), GpuClient())
    assert [(q["path"], q["gpu_allocated"]) for q in queues] == [("ml", 3), ("ads", 0), ("ads.prod", 0), ("dev", 0)]
    out = io.StringIO()
    assert top(_args("-o", "json", "--sort", "gpu"), GpuClient(), out=out) == 0
    first = json.loads(out.getvalue())["tasks"][0]
    assert (first["gpus"], first["gpu_util_percent"], first["gpu_memory_used_bytes"]) == ([1, 3], 70.0, 8 * 2**30)
