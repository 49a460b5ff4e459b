"""Who may call the LM service on the mutual-TLS port: a live GM certificate of this cluster.

TLS has already checked the chain to this cluster's CA and the dates (a certificate from
another CA, or an expired one, never gets this far: the handshake fails). What is left is
the kind of certificate (a node's is not a GM's) and whether it was revoked."""

from __future__ import annotations

from tcluster.domain.errors import PermissionDenied
from tcluster.master.identity.joining import PeerCert
from tcluster.master.identity.records import AuthStore
from tcluster.security.gmcert import GM_INDEX_LABEL, gm_of_common_name, gm_owner
from tcluster.security.pki import serial_of_cert


class GMGuard:
    def __init__(self, auth: AuthStore) -> None:
        self.auth = auth

    def admit(self, peer: PeerCert | None, call: str, gm_index: int | None = None) -> tuple[str, str]:
        """(GM name, certificate serial) of a caller allowed to use the LM service; acting as
        GM `gm_index` (Subscribe, Place) needs a certificate issued for that index."""
        if peer is None:
            raise PermissionDenied(f"{call}: the LM service on this port needs a GM client certificate "
                                   "(`tcl-master gm issue NAME --out DIR`)")
        gm = gm_of_common_name(peer.common_name)
        if gm is None:
            what = "a node certificate" if peer.common_name.startswith("node:") else "not a GM certificate"
            raise PermissionDenied(f"{call}: certificate {peer.common_name[:60]!r} is {what}; the LM service "
                                   "takes only GM certificates (CN gm:NAME, from `tcl-master gm issue`)")
        serial = serial_of_cert(peer.cert_pem)
        self.check_live(gm, serial, call, gm_index)
        return gm, serial

    def check_live(self, gm: str, serial: str, call: str, gm_index: int | None = None) -> None:
        status = self.auth.cert_status(serial)
        if status is None or status[0] != gm_owner(gm):
            raise PermissionDenied(f"{call}: GM {gm}'s certificate (serial {serial}) was revoked or is unknown to "
                                   "this cluster; issue a new one with `tcl-master gm issue`")
        bound = status[1].get(GM_INDEX_LABEL, "")
        if gm_index is not None and bound != str(gm_index):
            # issue 35: a certificate of GM 0 placed into GM 1's partition and got its task ends
            raise PermissionDenied(f"{call}: GM {gm}'s certificate is bound to GM index {bound or 'none'}, not "
                                   f"{gm_index}; issue one with `tcl-master gm issue {gm} --index {gm_index}`")
