"""Client certificates mapped to users at the GM (issue 35, part D), through real mutual TLS on
loopback: a secure LM, a GM with its GM certificate of that LM, serving TLS with `--client-ca`
of a federation CA. alice's certificate (CN user:alice) submits and her task runs as her
mapping on the LM; bob's certificate can neither read, list nor cancel it; a GM certificate
(CN gm:NAME) of the same CA cannot submit; a certificate naming no LM user is refused; and the
owner row survives a GM restart: a task left waiting, placed after it, still runs as alice's mapping."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.component.harness import Harness, run, wait_until
from tests.component.secure import SecureCluster
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.master.app.main import main as master_main
from tcluster.master.identity.accounts import add_user
from tcluster.security.pki import (LEAF_VALIDITY, as_of, cert_builder, cert_to_pem, key_to_pem, leaf_extensions,
                                   load_ca, make_ca, make_master_cert, new_key)
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2

SPEC = jobs_pb2.JobSpec(queue="a", tasks=1, command=["sleep"], resources=common_pb2.Resources(cpu=1, memory=2**28))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_cert(ca: tuple[bytes, bytes], common_name: str) -> tuple[bytes, bytes]:
    """(cert_pem, key_pem): a clientAuth certificate with this CN, from the federation CA."""
    ca_cert, ca_key = load_ca(*ca)
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (leaf_extensions(cert_builder(subject, ca_cert.subject, key.public_key(), as_of(None), LEAF_VALIDITY),
                             ca_cert, ExtendedKeyUsageOID.CLIENT_AUTH).sign(ca_key, hashes.SHA256()))
    return cert_to_pem(cert), key_to_pem(key)


def stub_as(ca_pem: bytes, pair: tuple[bytes, bytes], address: str) -> tuple[grpc.aio.Channel,
                                                                             federation_pb2_grpc.GlobalManagerServiceStub]:
    creds = grpc.ssl_channel_credentials(root_certificates=ca_pem, private_key=pair[1], certificate_chain=pair[0])
    channel = grpc.aio.secure_channel(address, creds)
    return channel, federation_pb2_grpc.GlobalManagerServiceStub(channel)


async def _error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value


def _gm_files(tmp: Path) -> tuple[tuple[bytes, bytes], dict[str, str]]:
    """The federation CA, and the GM's serving certificate from it (files for --tls-cert etc.)."""
    ca = make_ca()
    chain, key = make_master_cert(*ca, ["127.0.0.1"])
    files = {"tls_cert": tmp / "gm-cert.pem", "tls_key": tmp / "gm-key.pem", "client_ca": tmp / "fed-ca.pem"}
    for path, data in zip(files.values(), (chain, key, ca[0])):
        path.write_bytes(data)
    return ca, {k: str(v) for k, v in files.items()}


async def _checks(address: str, ca: tuple[bytes, bytes]) -> str:
    """What each certificate may do; returns alice's job id."""
    alice_ch, alice = stub_as(ca[0], client_cert(ca, "user:alice"), address)
    bob_ch, bob = stub_as(ca[0], client_cert(ca, "user:bob"), address)
    gm_ch, gm_cert = stub_as(ca[0], client_cert(ca, "gm:gm9"), address)
    nobody_ch, nobody = stub_as(ca[0], client_cert(ca, "user:mallory"), address)
    try:
        refused = await _error(gm_cert.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10))
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED and "GM certificate" in refused.details()
        refused = await _error(nobody.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10))
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED and "mallory" in refused.details()
        job = await alice.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10)
        assert job.owner == "alice"
        for call in (bob.Get(fpb.FedGetRequest(id=job.id), timeout=10),
                     bob.Cancel(fpb.FedCancelRequest(id=job.id), timeout=10),
                     gm_cert.Cancel(fpb.FedCancelRequest(id=job.id), timeout=10)):
            assert (await _error(call)).code() == grpc.StatusCode.PERMISSION_DENIED
        assert [j.id for j in (await bob.List(fpb.FedListRequest(), timeout=10)).jobs] == []
        assert [j.id for j in (await alice.List(fpb.FedListRequest(), timeout=10)).jobs] == [job.id]
        return job.id
    finally:
        for ch in (alice_ch, bob_ch, gm_ch, nobody_ch):
            await ch.close()


async def _runs_as_alice(h: Harness, address: str, ca: tuple[bytes, bytes], job_id: str, tasks: int) -> None:
    channel, alice = stub_as(ca[0], client_cert(ca, "user:alice"), address)
    try:
        async def running() -> bool:
            got = await alice.Get(fpb.FedGetRequest(id=job_id), timeout=10)
            return [t.state for t in got.tasks] == ["RUNNING"] * tasks
        await wait_until(running, 20)
        got = await alice.Get(fpb.FedGetRequest(id=job_id), timeout=10)
        assert h.master is not None
        assert {h.master.service.get(t.job_id)[0].spec.user for t in got.tasks} == {"nobody"}    # run_as on the LM
    finally:
        await channel.close()


def test_a_user_certificate_submits_as_that_user_and_a_gm_certificate_cannot(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3)
        await c.join("n1")
        await c.start_agent("n1")
        data, lm_tls = h.tmp / "master", tmp_path / "gm0-lm0"
        assert master_main(["gm", "issue", "gm0", "--index", "0", "--out", str(lm_tls), "--data-dir", str(data)]) == 0
        add_user(data, "alice", "nobody", ("a", "default"), admin=False)
        add_user(data, "bob", "daemon", ("a", "default"), admin=False)
        ca, files = _gm_files(tmp_path)
        address = f"127.0.0.1:{_free_port()}"
        settings = settings_from(dict(name="gm0", index=0, listen=address, state_dir=str(tmp_path / "gm"),
                                      lms=f"lm0={c.agent_address}", lm_tls=f"lm0={lm_tls}", queue_map="a=gm0",
                                      **files))
        gm = GMDaemon(settings)
        await gm.start()
        try:
            job_id = await _checks(address, ca)
            await _runs_as_alice(h, address, ca, job_id, 1)
            channel, alice = stub_as(ca[0], client_cert(ca, "user:alice"), address)
            four = jobs_pb2.JobSpec()
            four.CopyFrom(SPEC)
            four.tasks = 4                  # 3 fit beside the first job's task (n1 has 4 cpus), 1 waits
            second = (await alice.Submit(fpb.FedSubmitRequest(spec=four), timeout=10)).id

            async def three_run() -> bool:
                got = await alice.Get(fpb.FedGetRequest(id=second), timeout=10)
                return sorted(t.state for t in got.tasks) == ["PENDING", "RUNNING", "RUNNING", "RUNNING"]
            await wait_until(three_run)
            await channel.close()
        finally:
            await gm.stop()
        gm = GMDaemon(settings)        # the owner row (a certificate's user, no token) is durable
        await gm.start()
        try:
            channel, alice = stub_as(ca[0], client_cert(ca, "user:alice"), address)
            await alice.Cancel(fpb.FedCancelRequest(id=job_id), timeout=10)     # room for the 4th
            await _runs_as_alice(h, address, ca, second, 4)       # placed after the restart: still alice
            await alice.Cancel(fpb.FedCancelRequest(id=second), timeout=10)
            await channel.close()
        finally:
            await gm.stop()
    run(scenario, tmp_path)
