"""`gpu` is a resource kind like the others in fairness: DRF with a GPU-heavy and a
CPU-heavy queue, against a hand computation (issue 24)."""

from __future__ import annotations

import pytest

from tcluster.domain.resources import Resources
from tcluster.scheduler.queues import parse_queue_text
from tests.unit.test_fairness_policies import one_node_round

GiB = 2**30
TREE = parse_queue_text("queues:\n  ml: {}\n  etl: {}\n", "two-departments")
# One node: 12 cores, 64 GiB, 8 GPUs.
CAPACITY = Resources.of({"cpu": 12, "memory": 64 * GiB, "gpu": 8})
ML_TASK = Resources.of({"cpu": 1, "memory": 2 * GiB, "gpu": 2})   # shares: gpu 2/8 = 0.25 (dominant), cpu 1/12
ETL_TASK = Resources.of({"cpu": 3, "memory": 2 * GiB})            # shares: cpu 3/12 = 0.25 (dominant)


@pytest.mark.parametrize("policy", ["drf", "hdrf", "mch"])
def test_gpu_dominant_share_matches_the_hand_computation(policy: str) -> None:
    """By hand: both dominant shares are 0.25 a task, so DRF gives k tasks each while they
    fit: cpu k*1 + k*3 <= 12 -> k = 3 (GPUs 6 of 8). Then the CPUs are gone: neither
    fits a fourth. Dominant shares 3*2/8 = 0.75 (gpu) and 3*3/12 = 0.75 (cpu).

    Were gpu ignored, ml's dominant share would be its cpu (1/12 a task): DRF would equalise
    x/12 = 3y/12 and give ml 4 (all 8 GPUs) and etl 2; the test tells the two apart."""
    jobs = [("ml", ML_TASK, 20), ("etl", ETL_TASK, 20)]
    got = one_node_round(policy, jobs, CAPACITY, TREE)
    assert got == {"j0": 3, "j1": 3}
    assert ML_TASK.times(got["j0"]).dominant_share(CAPACITY) == pytest.approx(0.75)
    assert ETL_TASK.times(got["j1"]).dominant_share(CAPACITY) == pytest.approx(0.75)


def test_without_the_gpu_kind_the_split_would_differ() -> None:
    """The control: the same jobs on a cluster whose capacity has no `gpu` (so shares ignore
    it) but with GPUs still limiting ml through its own cap of 4 tasks."""
    no_gpu = Resources.of({"cpu": 12, "memory": 64 * GiB})
    jobs = [("ml", Resources.of({"cpu": 1, "memory": 2 * GiB}), 4), ("etl", ETL_TASK, 20)]
    assert one_node_round("drf", jobs, no_gpu, TREE) == {"j0": 4, "j1": 2}


def test_a_node_without_gpus_never_gets_a_gpu_task() -> None:
    jobs = [("ml", ML_TASK, 2)]
    assert one_node_round("drf", jobs, Resources.of({"cpu": 12, "memory": 64 * GiB}), TREE) == {"j0": 0}
