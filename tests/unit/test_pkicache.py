"""The etcd PKI cache (master/identity/pkicache.py): it holds a PKI or nothing, never an
"insecure" marker; and which bound/held pairs a master may lead with, as a table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tcluster.master.identity import pkicache
from tcluster.security.pki import MasterPki, new_master_pki

A = new_master_pki([], "cluster A")
B = new_master_pki([], "cluster B")
# The same CA, its master certificate issued again (another --advertise at a new init).
A_REISSUED = dataclasses.replace(A, cert_chain_pem=B.cert_chain_pem)


@pytest.mark.parametrize("bound,held,want", [
    (None, None, None),                                  # an insecure cluster, bound insecure
    (A, A, None),
    (dataclasses.replace(A, origin="cache"), A, None),   # where it came from does not matter
    (None, A, "holds a CA (sha256:"),                    # the review's case: plaintext on a secured cluster
    (A, None, "holds no PKI but this master's ports were bound with TLS"),
    (A, B, "holds CA sha256:"),                          # the prefix was initialised anew
    (A, A_REISSUED, "and master certificate that differ"),
])
def test_mismatch_table(bound: MasterPki | None, held: MasterPki | None, want: str | None) -> None:
    why = pkicache.mismatch(bound, held, "etcd prefix /t2")
    if want is None:
        assert why is None
    else:
        assert why is not None and why.startswith("etcd prefix /t2 ") and want in why


def test_the_cache_holds_a_pki_or_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "etcd-pki" / "k"
    assert pkicache.load(directory) is None                            # nothing cached yet
    pkicache.save(directory, A)
    assert pkicache.load(directory) == dataclasses.replace(A, origin=f"{directory} (cached from etcd)")
    assert {p.stat().st_mode & 0o777 for p in directory.iterdir()} == {0o600}
    pkicache.save(directory, None)                                     # etcd holds none: trust nothing
    assert pkicache.load(directory) is None and list(directory.iterdir()) == []


def test_an_older_versions_insecure_marker_is_removed_not_trusted(tmp_path: Path) -> None:
    directory = tmp_path / "k"
    directory.mkdir()
    (directory / pkicache.INSECURE).write_bytes(b"")
    assert pkicache.load(directory) is None and not (directory / pkicache.INSECURE).exists()
    (directory / pkicache.INSECURE).write_bytes(b"")
    pkicache.save(directory, A)
    assert not (directory / pkicache.INSECURE).exists() and pkicache.load(directory) is not None
