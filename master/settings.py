"""The master's settings: one model, loaded once in main and passed down."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tcluster.wire.features import DEFAULT_REPORT_BUDGET_PER_S
from tcluster.domain.ledger import DEFAULT_LEDGER_RETENTION_S
from tcluster.etcd.url import StoreUrl, check_prefix, parse_store_url
from tcluster.security.authz import STATUS_VISIBILITIES
from tcluster.scheduler.fairness import DEFAULT_FAIRNESS, FAIRNESS_POLICIES
from tcluster.scheduler.placement import DEFAULT_PLACEMENT, PLACEMENT_POLICIES
from tcluster.daemonkit.runner import one_of

# The settings that name one of a fixed set: (the choices as listed back, what one is called).
_CHOICES: dict[str, tuple[list[str], str]] = {
    "fairness": (sorted(FAIRNESS_POLICIES), "fairness policy"),
    "placement": (sorted(PLACEMENT_POLICIES), "placement policy"),
    "status_visibility": (list(STATUS_VISIBILITIES), ""),
}


_LM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:7070)")
    return value


class MasterSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = "127.0.0.1:7070"
    # With DATA_DIR/pki (`tcl-master init`) `listen` is TLS and agents use mutual TLS here;
    # "" = the listen host, port + 1 (port 0 when listen's is 0).
    agent_listen: str = ""
    insecure: bool = False                          # serve a non-loopback address without TLS
    data_dir: Path = Path(".tcluster")
    fairness: str = DEFAULT_FAIRNESS
    queues_file: Path | None = None                 # the queue tree (YAML); None: one queue, `default`
    reserve_after_s: float = Field(30.0, ge=0)      # a job's task waits this long: a node is held for it
    backfill: bool = True                           # a job ending before a reservation's estimate may use its room
    placement: str = DEFAULT_PLACEMENT
    # Decayed usage orders siblings (scheduler/decay.py); 0: off, the instantaneous shares only
    usage_half_life_s: float = Field(0.0, ge=0)
    # Preemption (README, "Preemption"): off unless asked.
    preemption: bool = False
    preempt_after_s: float = Field(30.0, ge=0)       # a queue below its target this long reclaims
    preempt_grace_s: float = Field(30.0, ge=0)       # a victim's SIGTERM..SIGKILL
    preempt_min_runtime_s: float = Field(60.0, ge=0)  # a younger task is no victim
    preempt_max_per_round: int = Field(10, ge=1)     # victims per round, all queues together
    heartbeat_interval_s: float = Field(1.0, gt=0, le=60)
    node_timeout_s: float = Field(15.0, gt=0)        # silent this long: DOWN
    # stream-liveness agents' usage reports, all nodes together, per second (issue 26)
    report_budget_per_s: float = Field(DEFAULT_REPORT_BUDGET_PER_S, gt=0)
    lost_timeout_s: float = Field(30.0, ge=0)        # DOWN this much longer: its tasks LOST
    start_timeout_s: float = Field(120.0, gt=0)      # STARTING this long without RUNNING: given up
    job_retention_s: float = Field(7 * 86400.0, gt=0)  # finished jobs are forgotten after this
    # --ledger-retention (TOML ledger_retention): each finished attempt's usage row is kept this long
    ledger_retention_s: float = Field(DEFAULT_LEDGER_RETENTION_S, gt=0)
    resident_finished_jobs: int = Field(1000, ge=0)  # finished jobs kept in memory; older ones read from disk
    schedule_interval_s: float = Field(1.0, gt=0)    # rounds also run on every change
    kill_grace_s: float = Field(10.0, ge=0)
    log_max_bytes: int = Field(16 * 2**20, gt=0)
    log_streams_per_user: int = Field(8, ge=1, le=1024)   # open `tcl logs` streams one user may hold
    execs_per_task: int = Field(4, ge=1, le=256)         # open `tcl exec`s into one task at once
    execs_per_user: int = Field(8, ge=1, le=1024)        # open `tcl exec`s one user may hold
    seed: int = 0
    # dashboards: HTTP (UI, /api/v1/, /metrics); "" = no HTTP server and no usage history
    http: str = ""
    http_optional: bool = False                      # the default address: if taken, run without it
    task_metrics: bool = True                        # per-task series on /metrics
    dcgm_gpu_metrics: bool = False                   # GPU series under DCGM's names too (opt-in)
    history_recent_s: float = Field(600.0, gt=0)     # at heartbeat resolution
    history_long_s: float = Field(86400.0, gt=0)     # downsampled
    history_long_step_s: float = Field(300.0, gt=0)
    history_flush_s: float = Field(30.0, gt=0)       # history is written in batches this often
    # --placement lotes: classes from a file, or k-means over the last lotes_window tasks
    lotes_classes_file: Path | None = None
    lotes_k: int = Field(4, ge=1, le=32)
    lotes_config_label: str | None = None           # group machines by this node label (default: by capacity)
    lotes_drift: float = Field(0.1, gt=0, le=1)     # re-solve past this drift of learned class shares
    lotes_window: int = Field(10_000, ge=1)
    lotes_min_interval_s: float = Field(2.0, ge=0)  # between two solves
    status_visibility: str = "all"                  # all | own: whose job status a (non-admin) user may read
    # Where the durable state lives (tcluster/etcd/url.py): "" = sqlite:DATA_DIR/master.db;
    # etcd://H:P,... = in etcd under store_prefix, with leader election (docs/ha.md).
    store: str = ""
    store_prefix: str = "/tcluster"
    lease_ttl_s: int = Field(5, ge=2, le=60)        # etcd: a dead leader is replaced this long after
    store_max_txn_ops: int = Field(128, ge=8)       # etcd's --max-txn-ops: bigger batches are split
    advertise: str = ""                             # the address other masters give clients for this one
    # Megha's federation (issue 25): this master is Local Manager number N of a federation
    # (LocalManagerService on the client port); None = no LM service.
    federation_lm_id: int | None = Field(None, ge=0, le=65535)
    federation_lm_name: str = ""                    # "" = lm<N>
    federation_gms: int = Field(2, ge=1, le=64)     # partitions: one per global manager
    federation_state_interval_s: float = Field(10.0, gt=0, le=3600)   # full state to every GM this often

    _listen = field_validator("listen")(lambda cls, v: _check_listen(v))
    _http = field_validator("http")(lambda cls, v: _check_listen(v) if v else v)
    _agent_listen = field_validator("agent_listen")(lambda cls, v: _check_listen(v) if v else v)

    _advertise = field_validator("advertise")(lambda cls, v: _check_listen(v) if v else v)

    @field_validator("federation_lm_name")
    @classmethod
    def _lm_name(cls, value: str) -> str:
        if value and not _LM_NAME.match(value):
            raise ValueError(f"{value[:64]!r} is not allowed; use 1-63 of A-Z a-z 0-9 _ . - starting with a letter "
                             "or digit (default lm<N>)")
        return value

    @property
    def lm_name(self) -> str:
        """The LM's name as GMs show it."""
        return self.federation_lm_name or f"lm{self.federation_lm_id}"

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        parse_store_url(value, Path("."))
        return value

    @field_validator("store_prefix")
    @classmethod
    def _good_prefix(cls, value: str) -> str:
        return check_prefix(value)

    @field_validator("fairness", "status_visibility", "placement")
    @classmethod
    def _known_choice(cls, value: str, info: ValidationInfo) -> str:
        choices, what = _CHOICES[str(info.field_name)]
        return one_of(value, choices, what)

    @property
    def store_url(self) -> StoreUrl:
        # the files were checked when the settings were made; a later read must not fail on them
        return parse_store_url(self.store, self.data_dir, check_files=False)

    @property
    def db_path(self) -> Path:
        """The SQLite file (with etcd: unused)."""
        url = self.store_url
        return url.path if url.path is not None else self.data_dir / "master.db"
