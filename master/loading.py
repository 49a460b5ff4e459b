"""The master's state as it starts: read from the store (unfinished jobs, the most recently
finished, the nodes, the kill intents), with the timeouts its settings give."""

from __future__ import annotations

from tcluster.domain.errors import NotFound
from tcluster.scheduler.decay import decode
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.settings import MasterSettings
from tcluster.master.store.base import StateStore


def timeouts_of(settings: MasterSettings) -> Timeouts:
    return Timeouts(node_timeout_s=settings.node_timeout_s, lost_timeout_s=settings.lost_timeout_s,
                    start_timeout_s=settings.start_timeout_s, job_retention_s=settings.job_retention_s,
                    heartbeat_interval_s=settings.heartbeat_interval_s,
                    resident_finished_jobs=settings.resident_finished_jobs,
                    preempt_grace_s=settings.preempt_grace_s, report_budget_per_s=settings.report_budget_per_s)


def not_found(job_id: str) -> NotFound:
    return NotFound(f"job {job_id[:64]!r} not found")


def load_state(store: StateStore, settings: MasterSettings, mono: float) -> MasterState:
    """Unfinished jobs and the most recently finished ones; older ones are read on demand."""
    timeouts = timeouts_of(settings)
    jobs = store.load_jobs(finished_limit=timeouts.resident_finished_jobs,
                           finished_tasks=timeouts.resident_finished_tasks)
    tasks = store.load_tasks({j.id for j in jobs})
    state = MasterState(jobs, tasks, store.load_nodes(), store.load_kills(), timeouts, mono)
    state.decayed_usage = decode(store.load_decayed_usage())
    for parent in sorted(set(state.dependents) - set(state.jobs)):   # waited on, ended, not resident
        stored = store.load_job(parent)
        if stored is not None:
            state.ended[parent] = stored[0].state
    return state
