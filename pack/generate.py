"""A generated heterogeneous cluster and workload for `tcl pack --generate` and the tests,
with the three ingredients the paper's comparisons need (Verma et al., section IV; the
notes' section 5): machine shapes of different cpu:memory ratios, cpu-heavy and
memory-heavy job shapes (stranding), a few picky jobs (big, or constrained to a label
fewer than 60% of the machines carry), in a random arrival order."""

from __future__ import annotations

import random

from tcluster.pack.schedule import PackJob
from tcluster.scheduler.views import NodeSpec
from tcluster.domain.resources import Resources

GiB = 2**30
SHAPES = [((32, 128 * GiB), 0.4), ((64, 128 * GiB), 0.25), ((16, 128 * GiB), 0.2), ((48, 384 * GiB), 0.15)]
JOB_SHAPES = [((1.0, 2 * GiB), 0.35), ((4.0, 4 * GiB), 0.25), ((1.0, 12 * GiB), 0.2), ((2.0, 8 * GiB), 0.2)]


def cluster(machines: int, seed: int) -> list[NodeSpec]:
    rng = random.Random(f"cluster-{seed}")
    out = []
    for i in range(machines):
        (cpu, mem), _ = rng.choices(SHAPES, [w for _, w in SHAPES])[0]
        labels = (("ssd", "yes"),) if rng.random() < 0.3 else ()
        out.append(NodeSpec(f"m{i:05d}", Resources(cpu, mem), labels))
    return out


def workload(machines: int, load: float, seed: int) -> list[PackJob]:
    """Jobs until the cpu requested reaches `load` of a cluster of this size's expected cpu."""
    rng = random.Random(f"workload-{seed}")
    target = load * machines * sum(c * w for (c, _), w in SHAPES)
    jobs, total = [], 0.0
    while total < target:
        i = len(jobs)
        if rng.random() < 0.03:   # picky: big, or on the 30% of machines with an ssd
            big = rng.random() < 0.5
            request = Resources(24.0, 96 * GiB) if big else Resources(2.0, 8 * GiB)
            job = PackJob(f"j{i:05d}", rng.randint(1, 4), request, () if big else ("ssd=yes",))
        else:
            (cpu, mem), _ = rng.choices(JOB_SHAPES, [w for _, w in JOB_SHAPES])[0]
            scale = rng.uniform(0.5, 1.5)
            job = PackJob(f"j{i:05d}", rng.randint(1, 20), Resources(round(cpu * scale, 2), int(mem * scale)))
        jobs.append(job)
        total += job.tasks * job.request.cpu
    return jobs
