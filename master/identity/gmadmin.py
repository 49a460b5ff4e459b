"""`tcl-master gm issue | revoke`: global-manager identities from this cluster's CA.

`issue` writes DIR/ca.pem, DIR/cert.pem, DIR/key.pem (the layout tcl-gm's --lm-tls reads)
and records the certificate's serial under `gm:<name>`, so `revoke` and the master's live
check treat it as they treat node certificates."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tcluster.domain.errors import FailedPrecondition, InvalidArgument
from tcluster.master.identity.choice import add_store_flags, choice_of, load_chosen_pki, open_chosen
from tcluster.security.gmcert import GM_INDEX_LABEL, check_gm_name, gm_owner, issue_gm_cert
from tcluster.security.certs import make_private_dir, write_private
from tcluster.security.pki import serial_of_cert


def add_gm_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gm = sub.add_parser("gm", help="global-manager (federation) identities").add_subparsers(dest="action",
                                                                                           required=True)
    issue = gm.add_parser("issue", help="write a GM client certificate, its key and the cluster CA to DIR")
    issue.add_argument("name")
    issue.add_argument("--index", type=int, default=0, metavar="N",
                       help="the GM's index (tcl-gm --index): the only partition this certificate may act for")
    issue.add_argument("--out", required=True, metavar="DIR", help="directory for ca.pem, cert.pem, key.pem")
    add_store_flags(issue)
    issue.set_defaults(run=cmd_gm_issue)
    revoke = gm.add_parser("revoke", help="stop a GM from calling this cluster's LM service")
    revoke.add_argument("name")
    add_store_flags(revoke)
    revoke.set_defaults(run=cmd_gm_revoke)


def cmd_gm_issue(args: argparse.Namespace) -> int:
    name = check_gm_name(args.name)
    if not 0 <= args.index <= 63:
        raise InvalidArgument("--index", f"{args.index} is not a GM index (0..63, as tcl-gm --index)")
    choice = choice_of(args)
    pki = load_chosen_pki(choice)
    if pki is None:
        raise FailedPrecondition(f"{choice.describe()} has no cluster CA; run `tcl-master init {choice.flags()}` "
                                 "first (an insecure master needs no GM certificate)")
    out = Path(args.out)
    if (out / "key.pem").exists():
        raise FailedPrecondition(f"--out: {out}/key.pem exists; choose an empty directory (never overwritten)")
    cert_pem, key_pem = issue_gm_cert(pki, name)
    auth = open_chosen(choice)
    try:
        auth.record_cert(serial_of_cert(cert_pem), gm_owner(name), "", {GM_INDEX_LABEL: str(args.index)}, time.time())
    finally:
        auth.close()
    make_private_dir(out)
    write_private(out / "key.pem", key_pem)
    write_private(out / "cert.pem", cert_pem)
    write_private(out / "ca.pem", pki.ca_pem)
    print(f"GM {name}: wrote {out}/ca.pem, cert.pem, key.pem (CN gm:{name}, GM index {args.index}, serial {serial_of_cert(cert_pem)})\n"
          f"on the GM: tcl-gm --lm-tls LMNAME={out} (and dial this master's agent port)")
    return 0


def cmd_gm_revoke(args: argparse.Namespace) -> int:
    name = check_gm_name(args.name)
    auth = open_chosen(choice_of(args))
    try:
        count = auth.revoke_node(gm_owner(name), time.time())
    finally:
        auth.close()
    if count == 0:
        raise FailedPrecondition(f"GM {name} holds no live certificate (never issued, or already revoked)")
    print(f"revoked {count} certificate(s) of GM {name}: the LM service refuses it from now on, and its open "
          "subscription ends at its next update. To let it back: `tcl-master gm issue` again.")
    return 0
