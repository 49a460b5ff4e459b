"""Masters on an etcd that speaks only TLS and requires client certificates
(`--client-cert-auth`): the store URL's cacert/cert/key reach it from the daemon, from
`tcl-master init` and `status`; a missing client certificate, an untrusted CA or
plaintext are refused with a message that names etcd, and a bad URL never starts."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tcluster.master.app.main import main as tcl_master
from tcluster.master.app.server import start_master
from testkit.etcd_single import SingleEtcd, tls_etcd  # noqa: F401  (the fixture)
from tests.component.test_etcd_ha import WAIT_S, get, settings, submit


def test_a_master_leads_on_a_tls_etcd_and_its_jobs_outlive_it(tmp_path: Path, tls_etcd: SingleEtcd,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Proves: with cacert, cert and key in --store, a master leads, writes jobs and a second
    master reads them after the first is gone; `tcl-master status` with the same URL shows
    the leader."""
    prefix = f"/tls-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        a = await start_master(settings(tmp_path, tls_etcd, prefix, "a"))
        await asyncio.wait_for(a.leading.wait(), WAIT_S)
        job = await submit(a, tasks=2)
        code = await asyncio.to_thread(tcl_master, ["status", "--store", tls_etcd.url, "--store-prefix", prefix,
                                                    "-o", "json"])
        assert code == 0 and f'"client": "127.0.0.1:{a.port}"' in capsys.readouterr().out
        await a.stop(grace_s=0)
        b = await start_master(settings(tmp_path, tls_etcd, prefix, "b"))
        try:
            await asyncio.wait_for(b.leading.wait(), WAIT_S)
            assert len((await get(b, job.id)).tasks) == 2
        finally:
            await b.stop(grace_s=0)
    asyncio.run(body())


def test_init_and_users_reach_a_tls_etcd(tmp_path: Path, tls_etcd: SingleEtcd,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Proves: the offline identity commands take the same URL: `init` writes the cluster's
    CA into the TLS etcd and `user add`/`user list` find it there; its hints repeat the URL."""
    prefix = f"/tls-{uuid.uuid4().hex[:8]}"
    flags = ["--store", tls_etcd.url, "--store-prefix", prefix, "--data-dir", str(tmp_path)]
    assert tcl_master(["init", *flags]) == 0
    out = capsys.readouterr().out
    assert "?cacert=" in out, out
    assert tcl_master(["user", "add", "alice", "--unix-user", "nobody", *flags]) == 0
    capsys.readouterr()
    assert tcl_master(["user", "list", *flags]) == 0
    assert "alice" in capsys.readouterr().out


@pytest.mark.parametrize("what, query", [
    ("no client certificate", "client=False"),
    ("an untrusted CA", "ca=other"),
    ("plaintext", "plain"),
])
def test_etcd_refuses_and_status_says_so(tmp_path: Path, tls_etcd: SingleEtcd, capsys: pytest.CaptureFixture[str],
                                         what: str, query: str) -> None:
    """Proves: a URL without the client certificate, with a CA that did not sign the
    member's certificate, or without TLS at all gets exit 1 and a one-line reason naming
    etcd and the endpoint, never a traceback."""
    certs = tls_etcd.certs
    assert certs is not None
    url = f"etcd://{tls_etcd.endpoint}" + {"client=False": certs.query(client=False),
                                           "ca=other": certs.query(ca=certs.other_ca), "plain": ""}[query]
    assert tcl_master(["status", "--store", url]) == 1, what
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("tcl-master status:"))
    assert "etcd did not answer" in line and tls_etcd.endpoint in line and "Traceback" not in err, err
    assert ("add ?cacert=PATH" in line) if query == "plain" else ("the TLS handshake failed" in line), line
    assert len(line) < 1000, line


@pytest.mark.parametrize("query, says", [
    ("?cacert=/nope.pem", "cacert=/nope.pem: not a readable file"),
    ("?cert=/etc/hostname", "cert and key go together"),
    ("?cacert=relative.pem", "must be an absolute path"),
    ("?ca=/etc/hostname", "unknown store URL parameter 'ca'; allowed: cacert, cert, key"),
    ("?cacert=/etc/hostname", "cacert=/etc/hostname: not a PEM file"),
])
def test_a_bad_store_url_is_a_usage_error_naming_the_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               query: str, says: str) -> None:
    assert tcl_master(["status", "--store", "etcd://127.0.0.1:2379" + query]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and says in err, err
    code = tcl_master(["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--store",
                       "etcd://127.0.0.1:2379" + query])
    err = capsys.readouterr().err
    assert code == 2 and says in err, err


def test_tls_paths_survive_the_url_round_trip(tmp_path: Path) -> None:
    """The URL a command prints (hints, status) names the same files when pasted back."""
    from tcluster.etcd.url import parse_store_url
    odd = tmp_path / "a+b &c%.pem"
    odd.write_text("-----BEGIN CERTIFICATE-----\n")
    url = parse_store_url(f"etcd://127.0.0.1:2379?cacert={odd.as_posix().replace('%', '%25').replace('&', '%26').replace('+', '%2B')}", tmp_path)
    assert url.tls is not None and url.tls.cacert == odd
    assert parse_store_url(str(url), tmp_path) == url
