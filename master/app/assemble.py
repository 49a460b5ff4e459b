"""The composition root's wiring of one leading master: the service and the features
plugged into it (master/app/server.py calls `assemble` when this master starts leading).

The service imports no feature. Here each feature gets what it needs and is registered
where the service or its edge calls it: step listeners in the order below, then the
dashboard's recorder once the dashboard runs (master/web/app.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from tcluster.master.features.federation_live import LiveLM
from tcluster.master.features.lotes_live import make_lotes
from tcluster.master.features.preempting import make_preemption
from tcluster.master.ledger import UsageLedger, ledger_path
from tcluster.master.service import MasterService
from tcluster.master.settings import MasterSettings
from tcluster.master.store.base import StateStore

log = logging.getLogger(__name__)


@dataclass
class Assembled:
    service: MasterService
    federation: LiveLM | None       # --federation-lm-id: Megha's Local Manager over this master


def assemble(settings: MasterSettings, store: StateStore, acting: Callable[[], bool] = lambda: True,
             clock: Callable[[], float] = time.time) -> Assembled:
    service = MasterService(settings, store, clock=clock, acting=acting)
    plugins = service.plugins
    plugins.listeners.append(service.node_counters)          # /metrics: drain requeues
    plugins.preemption = make_preemption(settings)            # None unless --preemption
    service.rounds.restore(service.clock())
    plugins.lotes = lotes = make_lotes(service, settings, service.placement)   # None unless --placement lotes
    if lotes is not None:
        plugins.listeners.append(lotes)                       # the LoTES book follows steps
    service.ledger = open_ledger(settings, store, service.clock)
    federation = LiveLM(service, settings) if settings.federation_lm_id is not None else None
    if federation is not None:
        plugins.listeners.append(federation)                  # task ends to their GMs, once durable
    return Assembled(service, federation)


def open_ledger(settings: MasterSettings, store: StateStore, clock: Callable[[], float]) -> UsageLedger | None:
    """The usage ledger's file: the state database (SQLite), or DATA_DIR/ledger.db (etcd,
    which gets etcd's hourly sums now). None if it cannot be opened: the master runs,
    `tcl report` answers UNAVAILABLE (with SQLite the rows are still written with the ends)."""
    etcd = settings.store_url.kind == "etcd"
    try:
        ledger = UsageLedger(ledger_path(settings.data_dir, settings.db_path, etcd), settings.ledger_retention_s,
                             clock, store if etcd else None)
    except Exception as error:    # noqa: BLE001 - a read-only disk: everything else still works
        log.error("usage ledger unavailable: %s", error)
        return None
    ledger.start()
    return ledger


__all__ = ["Assembled", "assemble", "open_ledger"]
