"""tcl-gm: run one Global Manager until SIGTERM/SIGINT.

The same daemon kit as tcl-master and tcl-agent: settings through tcluster/daemonkit/configfile.py
(gm/settings.py), logging through tcluster/daemon.setup_logging, and READY=1/STOPPING=1 to
systemd (tcluster/daemonkit/sdnotify.py) when it runs as a Type=notify unit."""

from __future__ import annotations

import asyncio
import logging
import sys

from tcluster.daemonkit.configfile import ConfigError
from tcluster.daemonkit.runner import setup_logging, wait_for_stop_signal
from tcluster.domain.errors import Unavailable
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import parse
from tcluster.gm.tls import TLSError
from tcluster.daemonkit.sdnotify import Notifier


async def _run(daemon: GMDaemon, notifier: Notifier) -> None:
    await daemon.start()
    logging.getLogger("tcluster.gm").info("tcl-gm %s serving on port %d", daemon.s.name, daemon.port)
    notifier.ready(f"{daemon.s.name} serving on port {daemon.port}")
    try:
        await wait_for_stop_signal()
    finally:
        notifier.stopping()
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
    setup_logging()
    try:
        daemon = GMDaemon(settings)
    except TLSError as e:
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 2
    notifier = Notifier.from_env()
    try:
        asyncio.run(_run(daemon, notifier))
    except Unavailable as e:          # --etcd given and etcd does not answer at start
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 1
    finally:
        notifier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
