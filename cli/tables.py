"""Human views: aligned tables and the `tcl status` page. Pure: `now` is passed in."""

from __future__ import annotations

import shlex
import time
from collections import Counter
from typing import Mapping, Sequence

from tcluster.cli.names import job_state_name, shown_job_state, task_state_name, tasks_total, used_resources
from tcluster.views.formats import format_table, signal_name, timestamp
from tcluster.domain.states import TERMINAL_TASK_STATES, TaskState
from tcluster.domain.units import format_bytes, format_cpu, format_duration
from tcluster.v1 import common_pb2, jobs_pb2
from tcluster.wire.basics import resources_from_pb

EMPTY = "-"
_TERMINAL_TASK_NAMES = frozenset(state.value for state in TERMINAL_TASK_STATES)


def format_age(seconds: float) -> str:
    """5s, 3m, 2h, 4d: the largest whole unit, like kubectl's AGE."""
    seconds = max(0, int(seconds))  # a skewed clock must not print "-3s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def age_cell(moment: float, now: float) -> str:
    return format_age(now - moment) if moment else EMPTY


def task_state_counts(job: jobs_pb2.Job) -> Counter[str]:
    """Of every row: from the ranges' counts when the reply shows only some rows."""
    if job.tasks_compact:
        return Counter({task_state_name(r.state): r.count for r in job.task_ranges})
    return Counter(task_state_name(task.state) for task in job.tasks)


def compact_lines(job: jobs_pb2.Job) -> str:
    """A big job's rows as index ranges per state, and the note on what is left out."""
    if not job.tasks_compact:
        return ""
    lines = [f"{task_state_name(r.state)} ({r.count}): {r.indexes or EMPTY}" for r in job.task_ranges]
    return "\n".join(["", *lines, job.compact_note])


def tasks_cell(job: jobs_pb2.Job) -> str:
    """'3/4 done': tasks in a terminal state over the job's task count."""
    counts = task_state_counts(job)
    done = sum(n for state, n in counts.items() if state in _TERMINAL_TASK_NAMES)
    return f"{done}/{tasks_total(job)} done"


def resource_cells(msg: common_pb2.Resources) -> tuple[str, str]:
    return format_cpu(msg.cpu), format_bytes(msg.memory)


def jobs_table(jobs: Sequence[jobs_pb2.Job], now: float) -> str:
    headers = ("ID", "NAME", "QUEUE", "OWNER", "STATE", "TASKS", "CPU", "MEM", "SUBMITTED")
    rows = []
    for job in jobs:
        cpu, mem = resource_cells(job.spec.resources)
        rows.append((
            job.id, job.spec.name or EMPTY, job.spec.queue or EMPTY, job.spec.owner or EMPTY, shown_job_state(job),
            tasks_cell(job), cpu, mem, age_cell(job.submitted_at, now),
        ))
    return format_table(headers, rows)


def exit_cell(task: jobs_pb2.Task) -> str:
    # A signal explains the end better than the shell-style 128+N code that may go with it.
    if task.signal:
        return signal_name(task.signal) or EMPTY
    return str(task.exit_code) if task.has_exit_code else EMPTY


def usage_cells(task: jobs_pb2.Task) -> tuple[str, str, str, str]:
    """CPU-S, CPU%, MEM, PEAK; dashes until the agent has sent a sample."""
    usage = task.usage
    if not usage.sampled_at and not usage.cpu_seconds and not usage.memory_peak_bytes:
        return EMPTY, EMPTY, EMPTY, EMPTY
    return (
        # Short tasks use milliseconds of CPU: keep them visible.
        f"{usage.cpu_seconds:.3f}" if usage.cpu_seconds < 10 else f"{usage.cpu_seconds:.1f}",
        f"{usage.cpu_rate * 100:.0f}%",
        format_bytes(usage.memory_bytes),
        format_bytes(usage.memory_peak_bytes),
    )


def tasks_table(tasks: Sequence[jobs_pb2.Task]) -> str:
    headers = ("INDEX", "STATE", "NODE", "TRY", "EXIT", "CPU-S", "CPU%", "MEM", "PEAK", "REASON")
    rows = [
        (str(task.index), task_state_name(task.state), task.node or EMPTY, str(task.attempt or EMPTY),
         exit_cell(task), *usage_cells(task), task.reason or EMPTY)
        for task in sorted(tasks, key=lambda t: t.index)
    ]
    if any(task.HasField("lotes_class") for task in tasks):   # LoTES: each task's class
        headers = (*headers[:4], "CLASS", *headers[4:])
        classes = [class_cell(task) for task in sorted(tasks, key=lambda t: t.index)]
        rows = [(*row[:4], k, *row[4:]) for row, k in zip(rows, classes)]
    if any(task.gpus for task in tasks):                      # GPU jobs: each task's devices and their use
        headers = (*headers[:3], "GPUS", *headers[3:])
        cells = [gpu_cell(task) for task in sorted(tasks, key=lambda t: t.index)]
        rows = [(*row[:3], g, *row[3:]) for row, g in zip(rows, cells)]
    return format_table(headers, rows)


def gpu_cell(task: jobs_pb2.Task) -> str:
    """'0,2' and, where NVML reported them, each device's utilization: '0,2 (87%,91%)'."""
    if not task.gpus:
        return EMPTY
    text = ",".join(map(str, task.gpus))
    util = {g.index: g.util_percent for g in task.gpu_usage}
    if util:
        text += " (" + ",".join(f"{util[i]:.0f}%" for i in task.gpus if i in util) + ")"
    return text


def class_cell(task: jobs_pb2.Task) -> str:
    return f"c{task.lotes_class}" if task.HasField("lotes_class") and task.lotes_class >= 0 else EMPTY


def when_cell(moment: float, now: float) -> str:
    stamp = timestamp(moment)
    return f"{stamp} ({format_age(now - moment)} ago)" if stamp else EMPTY


def counts_text(counts: Counter[str]) -> str:
    """'1 RUNNING, 2 PENDING' in lifecycle order."""
    order = [state.value for state in TaskState]
    ranked = sorted(counts.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    return ", ".join(f"{n} {state}" for state, n in ranked) or "none reported"


def job_view(job: jobs_pb2.Job, now: float) -> str:
    """`tcl status`: a header of `Key: value` lines, then the task table."""
    spec = job.spec
    header = [
        ("ID", job.id),
        ("Name", spec.name or EMPTY),
        ("Queue", spec.queue or EMPTY),
        ("Owner", f"{spec.owner or EMPTY} (runs as {spec.user or 'the agent default user'})"),
        ("State", shown_job_state(job)),
        ("Submitted", when_cell(job.submitted_at, now)),
        ("Finished", when_cell(job.finished_at, now)),
        ("Tasks", f"{tasks_cell(job)} ({counts_text(task_state_counts(job))})"),
        ("Resources", f"{resources_from_pb(spec.resources).describe()} per task"),
        ("Command", shlex.join(spec.command) or EMPTY),
        ("Share", f"{job.dominant_share:.3f} dominant, of the READY nodes (weight {spec.weight or 1:g})"),
    ]
    if spec.constraints:
        header.append(("Constraints", "; ".join(spec.constraints)))
    directory = spec.workdir or ("" if spec.image else spec.submit_dir)     # where each task starts
    if directory:
        header.append(("Directory", directory))
    header += batch_lines(job)
    if job.pending_reason:
        header.append(("Pending", job.pending_reason))
    if job.reason:
        header.append(("Ended", job.reason))
    width = max(len(key) for key, _ in header) + 2
    lines = [f"{key + ':':<{width}}{value}" for key, value in header]
    return "\n".join(lines) + "\n\n" + tasks_table(job.tasks) + compact_lines(job)


def batch_lines(job: jobs_pb2.Job) -> list[tuple[str, str]]:
    """Array, dependency, gang and time-limit lines of `tcl status`, where the job has them."""
    spec, lines = job.spec, []
    if spec.array:
        waiting = f"[{_clip(job.unplaced)}]" if job.unplaced else "none"
        throttle = f", at most {job.throttle} at once" if job.throttle else ""
        skipped = f", cancelled before starting [{_clip(job.skipped)}]" if job.skipped else ""
        lines.append(("Array", f"{spec.array.partition('%')[0]}{throttle}; waiting {waiting}{skipped}"))
    if spec.dependency:
        lines.append(("Depends on", spec.dependency + ("" if not job.released else " (met)")))
    if spec.gang:
        lines.append(("Gang", f"all {spec.tasks} tasks together"))
    if spec.time_limit_s:
        lines.append(("Time limit", format_duration(spec.time_limit_s)))
    return lines + output_lines(spec)


def output_lines(spec: jobs_pb2.JobSpec) -> list[tuple[str, str]]:
    """A job script and its output files (Slurm's StdOut/StdErr), where the job has them."""
    lines = []
    if spec.script:
        first = spec.script.split("\n", 1)[0]
        run_by = first[2:].strip() if first.startswith("#!") else "/bin/sh"
        text = f"{len(spec.script.splitlines())} lines, run by {run_by} (-o json shows it)"
        hidden = spec.script == "<redacted>"       # tcluster/views/redaction.py REDACTED (not imported: heavy)
        lines.append(("Script", "(only its owner and admins see it)" if hidden else text))
    if spec.stdout_file or spec.stderr_file:
        mode = f" ({spec.open_mode})" if spec.open_mode else ""
        lines.append(("Stdout", (spec.stdout_file or "the agent's log (tcl logs)") + mode))
        lines.append(("Stderr", spec.stderr_file or ("with stdout" if spec.stdout_file else EMPTY)))
    return lines


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width].rpartition(",")[0] + ",…"


def labels_cell(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or EMPTY


def nodes_table(nodes: Sequence[jobs_pb2.Node], lotes: bool = False, now: float = 0.0) -> str:
    """lotes: add the LoTES columns (configuration, target and actual class mixes). An
    OPERATOR column (who asked what, when, why) appears once any node has a cordon, a
    drain or a maintenance window."""
    headers: tuple[str, ...] = ("NAME", "STATE", "CPU", "MEM", "FREE CPU", "FREE MEM", "TASKS", "LABELS")
    if lotes:
        headers = (*headers[:7], "CONFIG", "TARGET", "ACTUAL", headers[7])
    notes = [node_ops_cell(node.ops, now) for node in sorted(nodes, key=lambda n: n.name)]
    if any(notes):
        headers = (*headers, "OPERATOR")
    rows = []
    for node in sorted(nodes, key=lambda n: n.name):
        used_cpu, used_mem = resource_cells(used_resources(node))
        cap_cpu, cap_mem = resource_cells(node.capacity)
        free_cpu, free_mem = resource_cells(node.free)
        row: tuple[str, ...] = (
            node.name, node.state or EMPTY, f"{used_cpu}/{cap_cpu}", f"{used_mem}/{cap_mem}",
            free_cpu, free_mem, str(len(node.tasks)), labels_cell(dict(node.labels)),
        )
        if lotes:
            row = (*row[:7], node.lotes.config or EMPTY, mix_cell(node.lotes.target), mix_cell(node.lotes.actual), row[7])
        if any(notes):
            row = (*row, notes[len(rows)] or EMPTY)
        rows.append(row)
    return format_table(headers, rows)


def clock_cell(moment: float, now: float) -> str:
    """A local time, with the date unless it is today's (and how far off, given now)."""
    same_day = now and time.localtime(moment)[:3] == time.localtime(now)[:3]
    text = time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", time.localtime(moment))
    if now and moment > now:
        text += f" (in {format_age(moment - now)})"
    return text


def node_ops_cell(ops: jobs_pb2.NodeOps, now: float = 0.0) -> str:
    """'draining by alice 14:02:11: kernel 6.8; deadline 15:02:11 (in 59m)'; "" if nothing was asked."""
    parts = []
    if ops.state and ops.state != "READY":
        text = f"{ops.state.lower()} by {ops.by or '?'} {clock_cell(ops.at, 0.0)}"
        text += f": {ops.reason}" if ops.reason else ""
        if ops.state == "DRAINING":
            text += f"; deadline {clock_cell(ops.drain_deadline, now)}" if ops.drain_deadline else "; no deadline"
        parts.append(text)
    if ops.maint_end:
        window = f"maint {clock_cell(ops.maint_start, 0.0)} - {clock_cell(ops.maint_end, 0.0)} by {ops.maint_by or '?'}"
        parts.append(window + (f": {ops.maint_reason}" if ops.maint_reason else ""))
    return "; ".join(parts)


def mix_cell(mix: Mapping[int, int]) -> str:
    """A LoTES class mix: 'c0:2 c1:1'."""
    return " ".join(f"c{k}:{n}" for k, n in sorted(mix.items()) if n) or EMPTY


def lotes_line(status: jobs_pb2.LotesStatus) -> str:
    """Under `tcl nodes` with --placement lotes: the plan in force, or why there is none."""
    head = status.fallback or "placement lotes: following the plan"
    classes = " ".join(f"c{k}={name}" for k, name in enumerate(status.classes))
    parts = [head]
    if status.last_solve:
        parts.append(f"last solve: {status.last_solve}")
    if classes:
        parts.append(f"classes: {classes} ({status.classes_source})")
    return "\n".join(parts)


def progress_line(job: jobs_pb2.Job) -> str:
    """One stderr line per change while `submit --wait` polls."""
    return f"job {job.id}: {job_state_name(job.state)} (tasks: {counts_text(task_state_counts(job))})"


def failure_summary(job: jobs_pb2.Job) -> str | None:
    """The first task that did not succeed, to say why a job failed."""
    for task in sorted(job.tasks, key=lambda t: t.index):
        if task_state_name(task.state) in ("FAILED", "KILLED", "LOST"):
            ended = exit_cell(task)
            detail = f", {task.reason}" if task.reason else ""
            return f"task {task.index} {task_state_name(task.state)} (exit {ended}{detail})"
    return None
