"""The cluster's PKI in etcd: P/pki/ca.crt, ca.key, master.crt, master.key.

Every master started on the same store serves with the same master certificate, whose
SANs carry the role name (`master.tcluster`, what clients verify) and the --advertise
names given at init: a client that trusts the CA accepts whichever master leads.

`init` writes the four keys and the first admin in one transaction that applies only if
P/pki/ca.crt does not exist yet (create_revision == 0), as `init` on a data dir refuses an
existing pki/: a second init can never replace a cluster's CA."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.domain.errors import FailedPrecondition
from tcluster.master.identity.records import User
from tcluster.master.identity.etcd import user_record
from tcluster.etcd.kv import EtcdKV, create_revision_is, put
from tcluster.etcd.mirror import Mirror
from tcluster.security.certs import ca_fingerprint
from tcluster.security.pki import PKI_FILES, MasterPki, pki_files, pki_from_files
from tcluster.security.tokens import token_hash


@dataclass(frozen=True)
class FirstAdmin:
    user: User
    token: str          # shown once by init; only its hash is written


def pki_prefix(prefix: str) -> str:
    return f"{prefix.rstrip('/')}/pki/"


async def read_pki(kv: EtcdKV, prefix: str) -> MasterPki | None:
    """The cluster's PKI, or None before `init` (an insecure master)."""
    kvs, _ = await kv.range_prefix(pki_prefix(prefix))
    files = {item.key.rsplit("/", 1)[1]: item.value for item in kvs}
    if not files:
        return None
    return pki_from_files(f"etcd {pki_prefix(prefix)}", files)


def pki_in_mirror(mirror: Mirror, prefix: str) -> MasterPki | None:
    """The same from a master's Mirror (no round trip), once it has loaded."""
    files = {name: value for name in PKI_FILES if (value := mirror.get(f"pki/{name}")) is not None}
    if not files:
        return None
    return pki_from_files(f"etcd {pki_prefix(prefix)}", files)


async def write_new_cluster(kv: EtcdKV, prefix: str, pki: MasterPki, admin: FirstAdmin) -> None:
    """The PKI and the first admin, all or nothing; FailedPrecondition if either exists."""
    ca_key = pki_prefix(prefix) + "ca.crt"
    admin_key = f"{prefix.rstrip('/')}/auth/users/{admin.user.name}"
    ops = [put(pki_prefix(prefix) + name, data) for name, data in pki_files(pki).items()]
    ops.append(put(admin_key, user_record(admin.user, token_hash(admin.token))))
    done = await kv.txn([create_revision_is(ca_key, 0), create_revision_is(admin_key, 0)], ops)
    if done.succeeded:
        return
    existing = await kv.get(ca_key)
    if existing is not None:
        raise FailedPrecondition(f"{ca_key} already exists in etcd: this cluster is initialised (CA "
                                 f"{_fingerprint(existing.value)}); use another --store-prefix, or delete "
                                 f"the prefix's keys to start a new cluster")
    raise FailedPrecondition(f"user {admin.user.name} already exists under {prefix}/auth/users (added before init); "
                             f"remove it with `tcl-master user remove {admin.user.name} --store ...` and init again")


def _fingerprint(ca_pem: bytes) -> str:
    try:
        return ca_fingerprint(ca_pem)
    except ValueError:
        return "unreadable"
