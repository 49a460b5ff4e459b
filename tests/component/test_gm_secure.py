"""tcl-gm against a secure master: the LM service on the mutual-TLS (agent) port takes only a
live GM certificate of that cluster (`tcl-master gm issue`). A GM with one subscribes and
places a task that runs; none, another CA's, a node's, or a revoked one is refused with the
reason; and tcl-gm refuses bad TLS material (missing files, wrong CA, node cert) at start."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from pathlib import Path

import grpc
import pytest

from tests.component.harness import Harness, run, wait_until
from tests.component.secure import SecureCluster
from testkit.procs import BIN
from tcluster.security.channel import TLS_OPTIONS
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.gm.tls import TLSError, load_lm_dir
from tcluster.master.app.main import main as master_main
from tcluster.master.identity.accounts import add_user
from tcluster.master.identity.nodeauth import NodeAuth
from tcluster.security.pki import init_pki
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _issue(data_dir: Path, name: str, out: Path, index: int = 0) -> Path:
    assert master_main(["gm", "issue", name, "--index", str(index), "--out", str(out), "--data-dir", str(data_dir)]) == 0
    return out


def _user(data_dir: Path, name: str = "alice") -> tuple[tuple[str, str], ...]:
    """A user of the LM (queue grants: all), as the metadata a GM client sends."""
    return (("authorization", f"Bearer {add_user(data_dir, name, '', ('*',), admin=False)}"),)


def _revoke(data_dir: Path, name: str) -> None:
    assert master_main(["gm", "revoke", name, "--data-dir", str(data_dir)]) == 0


def _write(out: Path, ca: bytes, cert: bytes, key: bytes) -> Path:
    out.mkdir(parents=True)
    for name, data in (("ca.pem", ca), ("cert.pem", cert), ("key.pem", key)):
        (out / name).write_bytes(data)
    return out


async def _subscribe_error(address: str, ca: bytes, cert: bytes | None, key: bytes | None) -> grpc.aio.AioRpcError:
    creds = grpc.ssl_channel_credentials(ca, key, cert)
    async with grpc.aio.secure_channel(address, creds, options=TLS_OPTIONS) as ch:
        stub = federation_pb2_grpc.LocalManagerServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.Subscribe(fpb.SubscribeRequest(gm=0, gm_name="gm0"), timeout=10):
                pass
        return err.value


def test_a_gm_certificate_of_the_cluster_places_a_task_that_runs(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3)
        await c.join("n1")
        await c.start_agent("n1")
        tls = _issue(h.tmp / "master", "gm0", tmp_path / "gm0-tls")
        port = _free_port()
        gm = GMDaemon(settings_from(dict(name="gm0", index=0, listen=f"127.0.0.1:{port}", state_dir=str(tmp_path / "gm"),
                                         lms=f"lm0={c.agent_address}", lm_tls=f"lm0={tls}", queue_map="a=gm0")))
        await gm.start()
        try:
            stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))
            spec = jobs_pb2.JobSpec(queue="a", tasks=1, command=["sleep"],
                                    resources=common_pb2.Resources(cpu=1, memory=2**28))
            alice = _user(h.tmp / "master")
            job_id = (await stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=10, metadata=alice)).id

            async def running() -> bool:
                job = await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=alice)
                return [t.state for t in job.tasks] == ["RUNNING"]
            await wait_until(running)

            async def launched() -> bool:      # the GM's RUNNING is the LM's answer; the launch follows it
                return len(h.agents["n1"].runtime.running_keys()) == 1      # it runs on the LM's node
            await wait_until(launched)
            await stub.Cancel(fpb.FedCancelRequest(id=job_id), timeout=10, metadata=alice)   # through the LM's JobService, mTLS

            async def cancelled() -> bool:
                return (await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=alice)).state == "CANCELLED"
            await wait_until(cancelled)

            async def killed() -> bool:
                return not h.agents["n1"].runtime.running_keys()
            await wait_until(killed)                                          # ended on the node
        finally:
            await gm.stop()
    run(scenario, tmp_path)


def test_the_lm_service_refuses_callers_without_a_live_gm_certificate(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3)
        await c.join("n1")
        node = c.credentials("n1")
        gm = _issue(h.tmp / "master", "gm0", tmp_path / "gm0-tls")
        cert, key = (gm / "cert.pem").read_bytes(), (gm / "key.pem").read_bytes()
        err = await _subscribe_error(c.agent_address, c.pki.ca_pem, node.cert_pem, node.key_pem)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "is a node certificate" in err.details()
        err = await _subscribe_error(c.agent_address, c.pki.ca_pem, None, None)     # no client certificate
        assert err.code() == grpc.StatusCode.UNAVAILABLE                        # the handshake itself fails
        other = init_pki(tmp_path / "other", [])
        from tcluster.security.gmcert import issue_gm_cert
        o_cert, o_key = issue_gm_cert(other, "gm0")
        err = await _subscribe_error(c.agent_address, c.pki.ca_pem, o_cert, o_key)
        assert err.code() == grpc.StatusCode.UNAVAILABLE                        # another CA: no handshake
        _revoke(h.tmp / "master", "gm0")
        err = await _subscribe_error(c.agent_address, c.pki.ca_pem, cert, key)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "was revoked" in err.details()
    run(scenario, tmp_path)


def test_a_gm_certificate_is_not_a_node_certificate(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        gm = _issue(h.tmp / "master", "gm0", tmp_path / "gm0-tls")
        from tcluster.master.identity.joining import NodeGuard, PeerCert
        from tcluster.domain.errors import PermissionDenied
        guard = NodeGuard(NodeAuth(h.tmp / "master"))
        cert = (gm / "cert.pem").read_bytes()
        try:     # the certificate's kind is checked before anything of the registration is read
            with pytest.raises(PermissionDenied, match="not a node certificate"):
                guard.admit(PeerCert("gm:gm0", cert), None)  # type: ignore[arg-type]
        finally:
            guard.auth.close()
        assert c.h.master is not None
    run(scenario, tmp_path)


def test_tcl_gm_refuses_bad_tls_material_with_the_reason(tmp_path: Path) -> None:
    pki = init_pki(tmp_path / "m", [])
    other = init_pki(tmp_path / "o", [])
    from tcluster.security.gmcert import issue_gm_cert
    from tcluster.security.nodekeys import make_node_csr
    from tcluster.security.pki import issue_node_cert
    with pytest.raises(TLSError, match="cannot read .*ca.pem"):
        load_lm_dir("lm0", str(tmp_path / "missing"))
    cert, key = issue_gm_cert(other, "gm0")
    with pytest.raises(TLSError, match="not issued by"):
        load_lm_dir("lm0", str(_write(tmp_path / "wrong-ca", pki.ca_pem, cert, key)))
    nkey, csr = make_node_csr("n1")
    with pytest.raises(TLSError, match="not a GM certificate"):
        load_lm_dir("lm0", str(_write(tmp_path / "node", pki.ca_pem, issue_node_cert(pki, csr, "n1"), nkey)))
    import datetime as dt
    old, okey = issue_gm_cert(pki, "gm0", validity=dt.timedelta(days=1),
                              now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))
    with pytest.raises(TLSError, match="expired"):
        load_lm_dir("lm0", str(_write(tmp_path / "old", pki.ca_pem, old, okey)))
    good, gkey = issue_gm_cert(pki, "gm0")
    assert load_lm_dir("lm0", str(_write(tmp_path / "good", pki.ca_pem, good, gkey))).cert_pem == good


def _dual_use_cert(ca_pem: bytes, ca_key_pem: bytes, name: str, out: Path) -> tuple[Path, Path]:
    """A GM's own certificate from the operator's federation CA: serves (127.0.0.1) and dials other GMs."""
    import datetime as dt
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    from tcluster.security.pki import key_to_pem, new_key
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    key, now = new_key(), dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))   # type: ignore[arg-type]
    out.mkdir(parents=True)
    (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "key.pem").write_bytes(key_to_pem(key))
    return out / "cert.pem", out / "key.pem"


def _tcl(gm: str, tls_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "tcl"), "--federation", gm, "--federation-tls", tls_dir, "-o", "json", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "TCL_FEDERATION": ""})


def test_gms_serve_mutual_tls_and_forward_to_each_other_over_it(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=2, federation_state_interval_s=0.3)
        await c.join("n1")
        await c.start_agent("n1")
        fed = init_pki(tmp_path / "fed-ca", [])          # the operator's CA for the GMs' own servers
        (tmp_path / "fed-ca.pem").write_bytes(fed.ca_pem)
        ports = [_free_port(), _free_port()]
        gms_flag = ",".join(f"gm{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
        daemons = []
        for i in range(2):
            lm_tls = _issue(h.tmp / "master", f"gm{i}", tmp_path / f"gm{i}-lm", index=i)
            cert, key = _dual_use_cert(fed.ca_pem, fed.ca_key_pem, f"gm{i}", tmp_path / f"gm{i}-own")
            daemons.append(GMDaemon(settings_from(dict(
                name=f"gm{i}", index=i, listen=f"127.0.0.1:{ports[i]}", state_dir=str(tmp_path / f"gm{i}"),
                lms=f"lm0={c.agent_address}", lm_tls=f"lm0={lm_tls}", gms=gms_flag, queue_map="a=gm0",
                tls_cert=str(cert), tls_key=str(key), client_ca=str(tmp_path / "fed-ca.pem")))))
        for d in daemons:
            await d.start()
        alice = _user(h.tmp / "master")
        try:
            cert, key = (tmp_path / "gm1-own" / "cert.pem").read_bytes(), (tmp_path / "gm1-own" / "key.pem").read_bytes()
            user = grpc.ssl_channel_credentials(fed.ca_pem, key, cert)
            async with grpc.aio.secure_channel(f"127.0.0.1:{ports[1]}", user) as ch:
                stub = federation_pb2_grpc.GlobalManagerServiceStub(ch)
                spec = jobs_pb2.JobSpec(queue="a", tasks=1, command=["sleep"],
                                        resources=common_pb2.Resources(cpu=1, memory=2**28))
                got = await stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=10, metadata=alice)   # gm1 forwards
                assert got.gm == "gm0"

                async def running() -> bool:
                    got_now = await stub.Get(fpb.FedGetRequest(id=got.id), timeout=10, metadata=alice)
                    return [t.state for t in got_now.tasks] == ["RUNNING"]
                await wait_until(running)
            # the real `tcl --federation ... --federation-tls DIR`: a user's certificate from the same CA
            user_dir = tmp_path / "alice"
            _dual_use_cert(fed.ca_pem, fed.ca_key_pem, "alice", user_dir)
            (user_dir / "ca.pem").write_bytes(fed.ca_pem)
            os.environ["TCL_TOKEN"] = alice[0][1].removeprefix("Bearer ")   # what `tcl --federation` sends
            try:
                shown = await asyncio.to_thread(_tcl, f"127.0.0.1:{ports[1]}", str(user_dir), "status", got.id)
            finally:
                del os.environ["TCL_TOKEN"]
            assert shown.returncode == 0 and json.loads(shown.stdout)["gm"] == "gm0", shown
            (user_dir / "key.pem").unlink()        # half a pair: a usage error naming the flag
            half = await asyncio.to_thread(_tcl, f"127.0.0.1:{ports[1]}", str(user_dir), "status", got.id)
            assert half.returncode == 2 and "--federation-tls" in half.stderr and "key.pem" in half.stderr, half
            for creds in (grpc.ssl_channel_credentials(fed.ca_pem), None):      # no client cert; plaintext
                async with (grpc.aio.secure_channel(f"127.0.0.1:{ports[0]}", creds) if creds is not None
                            else grpc.aio.insecure_channel(f"127.0.0.1:{ports[0]}")) as ch:
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await federation_pb2_grpc.GlobalManagerServiceStub(ch).Get(fpb.FedGetRequest(id="x"), timeout=5)
                    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            for d in daemons:
                await d.stop()
    run(scenario, tmp_path)


def test_a_gm_revoked_while_subscribed_is_cut_off_at_the_next_update(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.2)
        gm = _issue(h.tmp / "master", "gm0", tmp_path / "gm0-tls")
        creds = grpc.ssl_channel_credentials(c.pki.ca_pem, (gm / "key.pem").read_bytes(), (gm / "cert.pem").read_bytes())
        async with grpc.aio.secure_channel(c.agent_address, creds, options=TLS_OPTIONS) as ch:
            updates = federation_pb2_grpc.LocalManagerServiceStub(ch).Subscribe(
                fpb.SubscribeRequest(gm=0, gm_name="gm0"), timeout=20)
            await updates.read()                       # admitted: the first update (the layout) arrives
            _revoke(h.tmp / "master", "gm0")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                while True:
                    await updates.read()
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "was revoked" in err.value.details()
    run(scenario, tmp_path)
