"""`tcl-agent join --master HOST:PORT[,HOST:PORT...] --token TOKEN [--node NAME] [--state-dir D]`."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path

from tcluster.agent.joinclient import JoinError, join
from tcluster.domain.errors import InvalidArgument
from tcluster.security.bootstrap import PinMismatch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tcl-agent join",
        description="Join a secure cluster once: checks the master against the CA the token pins, then trades the "
                    "token for this node's certificate. Later `tcl-agent` starts (same --state-dir) use it.")
    p.add_argument("--master", required=True, metavar="HOST:PORT[,...]",
                   help="the master's client address; for HA masters, every one, comma-separated (each is "
                        "tried; all are kept for later starts)")
    p.add_argument("--token", required=True, help="from `tcl-master join-token create` (single use)")
    p.add_argument("--node", default=None, help="this node's name (default: hostname)")
    p.add_argument("--state-dir", type=Path, default=Path("/var/lib/tcluster/agent"),
                   help="where the identity is kept, as for tcl-agent (default %(default)s)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    node = args.node or socket.gethostname()
    try:
        outcome = asyncio.run(join(args.master, args.token, node, args.state_dir))
    except InvalidArgument as error:
        print(f"tcl-agent join: {error}", file=sys.stderr)
        return 2
    except (JoinError, PinMismatch) as error:
        print(f"tcl-agent join: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"tcl-agent join: cannot reach the master at {args.master}: {error.strerror or error}", file=sys.stderr)
        return 1
    state = outcome.state
    labels = ",".join(f"{k}={v}" for k, v in sorted(state.labels.items()))
    print(f"joined as node {state.node}{' with labels ' + labels if labels else ''}; identity in "
          f"{args.state_dir}/pki (CA {state.ca_fingerprint}).\n"
          f"Start the agent: tcl-agent --state-dir {args.state_dir}   (or: systemctl enable --now tcl-agent); "
          f"it connects to {state.agent_address} with mutual TLS.")
    return 0
