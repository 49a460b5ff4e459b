"""The composition root's wiring of one leading master: the service and the features
plugged into it (master/app/server.py calls `assemble` when this master starts leading).

The service imports no feature. Here each feature gets what it needs and is registered
where the service or its edge calls it: step listeners in the order below, then the
dashboard's recorder once the dashboard runs (master/web/app.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from tcluster.master.features.federation_live import LiveLM
from tcluster.master.features.lotes_live import make_lotes
from tcluster.master.features.preempting import make_preemption
from tcluster.master.service import MasterService
from tcluster.master.settings import MasterSettings
from tcluster.master.store.base import StateStore


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
    federation = LiveLM(service, settings) if settings.federation_lm_id is not None else None
    if federation is not None:
        plugins.listeners.append(federation)                  # task ends to their GMs, once durable
    return Assembled(service, federation)


__all__ = ["Assembled", "assemble"]
