"""A master state database with a long history: many finished jobs, written by the
master's own store code (`Store.apply` on the steps a submit and the tasks' ends make),
so a loaded master starts from exactly what a long-running one would have on disk."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tcluster.master.core.events import Step
from tcluster.master.store.sqlite import Store
from tcluster.domain.model import Job, JobSpec, JobState, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources

MiB = 2**20


def preload(db_path: Path, finished_tasks: int, tasks_per_job: int = 1000, nodes: int = 1000,
            now: float | None = None) -> float:
    """Writes `finished_tasks` SUCCEEDED tasks in jobs of `tasks_per_job`, finished within
    the last hour (inside any retention). Returns the seconds it took."""
    start = time.monotonic()
    now = time.time() if now is None else now
    store = Store(db_path)
    try:
        jobs = (finished_tasks + tasks_per_job - 1) // tasks_per_job
        written = 0
        for j in range(jobs):
            count = min(tasks_per_job, finished_tasks - written)
            job_id = f"{0xf0000000 + j:08x}"
            spec = JobSpec(command=("sleep", "1"), resources=Resources(0.1, 128 * MiB), name=f"history-{j}",
                           tasks=count)
            submitted = now - 3600 + j * 1e-3
            finished = submitted + 60
            job = Job(id=job_id, spec=spec, submitted_at=submitted, state=JobState.SUCCEEDED, finished_at=finished)
            step = Step(jobs={job_id: job})
            for i in range(count):
                usage = TaskUsage(cpu_seconds=0.9, cpu_rate=0.09, memory_bytes=90 * MiB, memory_peak_bytes=100 * MiB,
                                  memory_anon_bytes=80 * MiB, memory_file_bytes=10 * MiB, pids=1, sampled_at=finished)
                task = Task(job_id=job_id, index=i, state=TaskState.SUCCEEDED, node=f"sim-{(j * count + i) % nodes:05d}",
                            attempt=1, exit_code=0, started_at=finished - 10, finished_at=finished, usage=usage)
                step.tasks[task.id] = task
            store.apply(step, [job_id])
            written += count
    finally:
        store.close()
    return time.monotonic() - start


def cached_history(cache_dir: Path, finished_tasks: int, tasks_per_job: int = 1000) -> Path:
    """A preloaded database kept between runs (it takes a while to write)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"history-{finished_tasks}-{tasks_per_job}.db"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        for leftover in tmp.parent.glob(tmp.name + "*"):
            leftover.unlink()
        preload(tmp, finished_tasks, tasks_per_job)
        _checkpoint(tmp)
        tmp.rename(path)
    return path


def _checkpoint(path: Path) -> None:
    import sqlite3
    db = sqlite3.connect(str(path))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def install_history(source: Path, data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, data_dir / "master.db")
