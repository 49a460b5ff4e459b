"""tcl-gm: run one Global Manager until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from tcluster.errors import Unavailable
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import SettingsError, parse
from tcluster.gm.tls import TLSError


async def _run(daemon: GMDaemon) -> None:
    await daemon.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("tcluster.gm").info("tcl-gm %s serving on port %d", daemon.s.name, daemon.port)
    await stop.wait()
    await daemon.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["queues"]:           # the operator's command on the etcd queue map
        from tcluster.gm.queuescmd import main as queues
        return queues(argv[1:])
    try:
        settings = parse(argv)
    except SettingsError as e:
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        daemon = GMDaemon(settings)
    except TLSError as e:
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(daemon))
    except Unavailable as e:          # --etcd given and etcd does not answer at start
        print(f"tcl-gm: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
