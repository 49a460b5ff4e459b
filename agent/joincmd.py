"""`tcl-agent join --master HOST:PORT[,HOST:PORT...] --token-file FILE|- [--node NAME] [--state-dir D]`.

The token is a secret: read from a file, stdin (`-`) or $TCL_JOIN_TOKEN, so that it is not
on a command line every local user can read in /proc; `--token TOKEN` still works."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from tcluster.agent.joinclient import JoinError, join
from tcluster.domain.errors import InvalidArgument
from tcluster.security.bootstrap import PinMismatch
from tcluster.security.nodekeys import OpensslMissing


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tcl-agent join",
        description="Join a secure cluster once: checks the master against the CA the token pins, then trades the "
                    "token for this node's certificate. Later `tcl-agent` starts (same --state-dir) use it.")
    p.add_argument("--master", required=True, metavar="HOST:PORT[,...]",
                   help="the master's client address; for HA masters, every one, comma-separated (each is "
                        "tried; all are kept for later starts)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--token-file", metavar="FILE|-",
                       help="a file holding the token from `tcl-master join-token create` (single use); - reads "
                            "stdin. Without it: $TCL_JOIN_TOKEN")
    which.add_argument("--token", help="the token itself (visible to every local user in ps: prefer --token-file)")
    p.add_argument("--node", default=None, help="this node's name (default: hostname)")
    p.add_argument("--state-dir", type=Path, default=Path("/var/lib/tcluster/agent"),
                   help="where the identity is kept, as for tcl-agent (default %(default)s)")
    return p


MAX_TOKEN_BYTES = 4096


def read_token(args: argparse.Namespace) -> str:
    """The token from --token, --token-file (- is stdin) or $TCL_JOIN_TOKEN, stripped."""
    if args.token is not None:
        return str(args.token).strip()
    if args.token_file is None:
        return os.environ.get("TCL_JOIN_TOKEN", "").strip()
    try:
        if args.token_file == "-":
            text = sys.stdin.read(MAX_TOKEN_BYTES + 1)
        else:
            with open(args.token_file, encoding="utf-8") as f:
                text = f.read(MAX_TOKEN_BYTES + 1)
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidArgument("--token-file", f"cannot read {args.token_file}: {error}") from None
    if len(text) > MAX_TOKEN_BYTES:
        raise InvalidArgument("--token-file", f"{args.token_file} holds more than {MAX_TOKEN_BYTES} bytes: not a token")
    return text.strip()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    node = args.node or socket.gethostname()
    try:
        token = read_token(args)
        if not token:
            raise InvalidArgument("--token-file", "no join token: give --token-file FILE (or - for stdin), or set "
                                                  "$TCL_JOIN_TOKEN; on the master: tcl-master join-token create")
        outcome = asyncio.run(join(args.master, token, node, args.state_dir))
    except InvalidArgument as error:
        print(f"tcl-agent join: {error}", file=sys.stderr)
        return 2
    except (JoinError, PinMismatch, OpensslMissing) as error:
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
