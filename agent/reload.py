"""The agent under systemd: READY=1 once its tasks are re-adopted, STATUS= lines, and SIGHUP,
which re-reads the command line's --config file and applies what can change live.

Live (read at each use by the task manager): the log level,
task_retention_s, default_user, allow_root and deny_uids (a tightened policy holds for the
next launch). Everything else (capacity, labels, master, runtime, networks, ...) is fixed
at start: the master and the runtime were set up with it, so a change is logged as needing
`systemctl restart tcl-agent` and the running value stays."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Callable

from pydantic import ValidationError

from tcluster.agent.daemon import Agent
from tcluster.agent.joinstate import JoinedStateError
from tcluster.agent.settings import AgentSettings
from tcluster.daemonkit.configfile import ConfigError, Loaded, load_args
from tcluster.daemonkit.runner import changed_settings, explain_argument_error, explain_settings_error, set_log_level
from tcluster.domain.errors import InvalidArgument
from tcluster.daemonkit.sdnotify import Notifier

log = logging.getLogger(__name__)
LIVE = ("task_retention_s", "default_user", "allow_root", "deny_uids")


class AgentReloader:
    def __init__(self, agent: Agent, parser: argparse.ArgumentParser, loaded: Loaded,
                 make_settings: Callable[[argparse.Namespace], AgentSettings], notifier: Notifier) -> None:
        self.agent, self.parser, self.loaded = agent, parser, loaded
        self.make_settings, self.notifier = make_settings, notifier

    def install(self) -> None:
        """SIGHUP was ignored until now (main): a reload before READY has nothing to reload."""
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)

    def uninstall(self) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    def reload(self) -> list[str]:
        """Returns the settings that changed but need a restart (also logged)."""
        self.notifier.reloading()
        try:
            return self._reload()
        finally:
            self.notifier.ready("reloaded")

    def _reload(self) -> list[str]:
        try:
            loaded = load_args(self.parser, self.loaded.argv)
            new = self.make_settings(loaded.args)
        except ConfigError as error:
            return self._refused(str(error))
        except InvalidArgument as error:
            return self._refused(explain_argument_error("tcl-agent", error, loaded.origin))
        except ValidationError as error:
            return self._refused(explain_settings_error("tcl-agent", error, loaded.origin))
        except (JoinedStateError, OSError) as error:
            return self._refused(str(error))
        if loaded.args.log_level != self.loaded.args.log_level:
            set_log_level(loaded.args.log_level)
            log.info("reload: log level %s", loaded.args.log_level.upper())
        self.loaded = loaded
        old = self.agent.settings
        changed = changed_settings(old, new)
        live = {name: getattr(new, name) for name in changed if name in LIVE}
        if live:
            settings = old.model_copy(update=live)
            self.agent.settings = self.agent.tasks.settings = settings
            log.info("reload: applied %s", ", ".join(f"{k}={v!r}" for k, v in live.items()))
        later = [name for name in changed if name not in LIVE]
        if later:
            log.warning("reload: %s changed; they take effect after a restart (systemctl restart tcl-agent)",
                        ", ".join(later))
        if not changed:
            log.info("reload: no setting changed")
        return later

    def _refused(self, why: str) -> list[str]:
        log.error("reload refused, the running settings stay: %s", why)
        return []
