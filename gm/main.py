"""tcl-gm: run one Global Manager until SIGTERM/SIGINT.

The same daemon kit as tcl-master and tcl-agent: settings through tcluster/daemonkit/configfile.py
(gm/settings.py), logging through tcluster/daemon.setup_logging, and READY=1/STOPPING=1 to
systemd (tcluster/daemonkit/sdnotify.py) when it runs as a Type=notify unit."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from tcluster.daemonkit.configfile import ConfigError
from tcluster.daemonkit.runner import set_log_level, setup_logging, wait_for_stop_signal
from tcluster.domain.errors import Unavailable
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import parse
from tcluster.gm.tls import TLSError
from tcluster.daemonkit.sdnotify import Notifier


log = logging.getLogger("tcluster.gm")


def on_sighup(daemon: GMDaemon, argv: list[str]) -> str:
    """SIGHUP (issue 35: tcl-gm died of it, as a process does by default): the flags and
    config file are read again and checked; none of the GM's settings changes while it
    runs (its LMs, GMs, queues and state shape its placements), so a change is named as
    taking effect at the next start; a bad file is reported and the GM goes on as it was."""
    try:
        fresh = parse(argv)
    except ConfigError as error:
        return f"SIGHUP: the configuration is not valid, nothing changed: {error}"
    except SystemExit:            # argparse on a flag it cannot take: never the end of a running GM
        return "SIGHUP: the configuration is not valid (see the message above), nothing changed"
    # Issue 35: the revocation path. Tokens are asked of the LMs again, so a user removed there
    # is refused at once instead of up to 30 s (gm/auth.py's AUTH_CACHE_S) later.
    dropped = daemon.forget_tokens()
    applied = f"; {dropped} cached user tokens dropped" if dropped else ""
    if fresh.log_level != daemon.s.log_level:       # the one live setting, as on tcl-master and tcl-agent
        set_log_level(fresh.log_level)
        daemon.s = daemon.s.model_copy(update={"log_level": fresh.log_level})
        applied += f"; log level {fresh.log_level} applied"
    old, new = daemon.s.model_dump(), fresh.model_dump()
    changed = sorted(k for k in new if new[k] != old.get(k))
    if not changed:
        return f"SIGHUP: configuration read again{applied or '; nothing changed'}"
    return f"SIGHUP: configuration read again{applied}; {', '.join(changed)} changed and take effect at the next start"


async def _run(daemon: GMDaemon, notifier: Notifier, argv: list[str] | None = None) -> None:
    daemon.placer.after_turn = notifier.watchdog      # WatchdogSec= in systemd/tcl-gm.service
    loop = asyncio.get_running_loop()
    again = sys.argv[1:] if argv is None else argv
    # Before "serving" is logged: a SIGHUP sent as soon as the GM says it serves is a reload.
    loop.add_signal_handler(signal.SIGHUP, lambda: log.warning("%s", on_sighup(daemon, again)))
    http = None
    try:
        await daemon.start()
        if daemon.s.http:
            from tcluster.gm.web import start_http
            http, http_port = await start_http(daemon, daemon.s.http)
            log.info("tcl-gm %s: /metrics and the status page on port %d", daemon.s.name, http_port)
        log.info("tcl-gm %s serving on port %d", daemon.s.name, daemon.port)
        notifier.ready(f"{daemon.s.name} serving on port {daemon.port}")
        await wait_for_stop_signal()
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        notifier.stopping()
        if http is not None:
            await http.cleanup()
        await daemon.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["queues"]:           # the operator's command on the etcd queue map
        from tcluster.gm.queuescmd import main as queues
        return queues(argv[1:])
    try:
        settings = parse(argv)
    except ConfigError as e:
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, settings.log_format)
    try:
        daemon = GMDaemon(settings)
    except TLSError as e:
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 2
    notifier = Notifier.from_env()
    try:
        asyncio.run(_run(daemon, notifier, argv))
    except Unavailable as e:          # --etcd given and etcd does not answer at start
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 1
    except OSError as e:              # a busy --listen port (tcluster/daemonkit/listen.py), a state dir
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 1
    finally:
        notifier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
