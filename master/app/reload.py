"""The master under systemd: READY=1 once its ports serve, WATCHDOG=1 from the scheduling
loop (a standby, which has no loop, pings from its own), STATUS= lines, and SIGHUP.

SIGHUP re-reads the queue file (as it always did) and, with --config, the config file:
live are the log level and `queues` (a new path is read at once); any other changed
setting is logged as needing `systemctl restart tcl-master` and the running value stays
(the store, ports, policies and timeouts were set up with it)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Callable

from pydantic import ValidationError

from tcluster.daemonkit.configfile import ConfigError, Loaded, load_args
from tcluster.daemonkit.runner import changed_settings, explain_settings_error, set_log_level
from tcluster.master.app.server import RunningMaster
from tcluster.master.settings import MasterSettings
from tcluster.daemonkit.sdnotify import Notifier

log = logging.getLogger(__name__)
LIVE = ("queues_file",)
STATUS_EVERY_S = 10.0


class MasterReloader:
    def __init__(self, master: RunningMaster, parser: argparse.ArgumentParser | None, loaded: Loaded | None,
                 make_settings: Callable[[argparse.Namespace], MasterSettings], notifier: Notifier) -> None:
        self.master, self.parser, self.loaded = master, parser, loaded
        self.make_settings, self.notifier = make_settings, notifier

    def reload(self) -> list[str]:
        """Returns the changed settings that need a restart (also logged)."""
        self.notifier.reloading()
        try:
            later = self._reread_config()
            if self.master.service is not None:
                self.master.service.reload_queues()
            return later
        finally:
            self.notifier.ready(self.status())

    def _reread_config(self) -> list[str]:
        if self.parser is None or self.loaded is None or self.loaded.config is None:
            return []
        try:
            loaded = load_args(self.parser, self.loaded.argv)
            new = self.make_settings(loaded.args)
        except ConfigError as error:
            log.error("reload refused, the running settings stay: %s", error)
            return []
        except ValidationError as error:
            log.error("reload refused, the running settings stay: %s",
                      explain_settings_error("tcl-master", error, loaded.origin))
            return []
        if loaded.args.log_level != self.loaded.args.log_level:
            set_log_level(loaded.args.log_level)
            log.info("reload: log level %s", loaded.args.log_level.upper())
        self.loaded = loaded
        changed = changed_settings(self.master.settings, new)
        live = {name: getattr(new, name) for name in changed if name in LIVE}
        if live:
            self.master.settings = self.master.settings.model_copy(update=live)
            if self.master.service is not None:      # reload_queues reads the path from here
                self.master.service.use_settings(self.master.service.settings.model_copy(update=live))
            log.info("reload: applied %s", ", ".join(f"{k}={v}" for k, v in live.items()))
        later = [name for name in changed if name not in LIVE]
        if later:
            log.warning("reload: %s changed; they take effect after a restart (systemctl restart tcl-master)",
                        ", ".join(later))
        return later

    def status(self) -> str:
        service = self.master.service
        if service is None:
            return f"standby on port {self.master.port}"
        state = service.state
        ready = sum(1 for n in state.nodes.values() if str(getattr(n.state, "value", n.state)) == "READY")
        return (f"leading on port {self.master.port}: {ready}/{len(state.nodes)} node(s) ready, "
                f"{len(state.pending_jobs)} job(s) pending")

    async def feed(self) -> None:
        """READY=1 was sent; from here: the scheduling loop pings the watchdog once the
        master leads (service.rounds.after_round); until then (a standby) this does. STATUS=
        lines every STATUS_EVERY_S."""
        hooked = False
        while True:
            service = self.master.service
            if service is None:
                self.notifier.watchdog()
            elif not hooked:
                service.rounds.after_round = self.notifier.watchdog
                hooked = True
            self.notifier.status(self.status())
            interval = self.notifier.watchdog_s or STATUS_EVERY_S
            await asyncio.sleep(min(STATUS_EVERY_S, interval / 4))
