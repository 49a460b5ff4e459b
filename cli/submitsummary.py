"""The line `tcl submit` prints on stderr after a submit: what it understood, in the units
it reads back (`4 tasks × cpu 0.5, memory 4Gi, time limit 1h30m, in /home/alice/proj`), so
a Slurm habit read another way (`--mem 4096`, `--time-limit 90`) shows at once. Pure."""

from __future__ import annotations

from tcluster.domain.arrays import parse_array
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import CPU, GPU, MEMORY
from tcluster.domain.slurmunits import format_memory, format_time_limit
from tcluster.domain.units import format_cpu


def summary_line(spec: JobSpec) -> str:
    count = len(parse_array(spec.array)[0]) if spec.array else spec.tasks
    amounts = spec.resources.as_dict()
    parts = [f"{count} task{'' if count == 1 else 's'} × cpu {format_cpu(amounts.get(CPU, 0.0))}",
             f"memory {format_memory(amounts.get(MEMORY, 0.0))}"]
    if amounts.get(GPU):
        parts.append(f"gpu {amounts[GPU]:g}")
    parts += [f"{kind} {amount:g}" for kind, amount in sorted(amounts.items()) if kind not in (CPU, MEMORY, GPU)]
    if spec.time_limit_s > 0:
        parts.append(f"time limit {format_time_limit(spec.time_limit_s)}")
    parts.append(f"in {_where(spec)}")
    return ", ".join(parts)


def _where(spec: JobSpec) -> str:
    if spec.workdir:
        return spec.workdir
    if spec.image:
        return "the image's working directory"
    return spec.submit_dir or "the task's private /tmp"
