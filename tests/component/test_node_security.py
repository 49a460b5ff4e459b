"""Node identity with real TLS on loopback: join tokens, mutual TLS on the agent port,
the certificate binds the node name, revocation, and a pinned CA on the agent side."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest

from tcluster.agent.joinclient import JoinError
from tcluster.agent.joinstate import is_joined
from tcluster.master.app.main import main as master_main
from tcluster.security.channel import TLS_OPTIONS
from tcluster.security.bootstrap import PinMismatch, fetch_pinned_ca
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.nodekeys import make_node_csr
from tcluster.security.pki import init_pki, issue_node_cert
from tcluster.v1 import agent_pb2, agent_pb2_grpc, jobs_pb2, join_pb2, join_pb2_grpc
from tests.component.harness import Harness, run, wait_until
from tests.component.secure import SecureCluster, connect_once

READY, DOWN = "READY", "DOWN"


def test_joined_agents_register_with_mutual_tls_get_token_labels_and_run_jobs(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        assert h.master is not None and h.master.agent_port not in (0, h.master.port)
        await c.join("n1", c.token(labels={"rack": "r7"}))
        await c.join("n2")
        await c.start_agent("n1")
        await c.start_agent("n2")
        nodes = await c.nodes()
        assert {n: nodes[n].state for n in nodes} == {"n1": READY, "n2": READY}
        assert dict(nodes["n1"].labels) == {"rack": "r7"}
        job = await h.submit(["true"], tasks=2, constraints=["rack=r7"])
        done = await h.wait_job(job.id, lambda j: j.state == jobs_pb2.JOB_SUCCEEDED)
        assert [t.node for t in done.tasks] == ["n1", "n1"]
        assert len(h.agents["n1"].runtime.started) == 2 and not h.agents["n2"].runtime.started
    run(scenario, tmp_path)


def test_a_node_cannot_claim_reserved_labels_nor_override_its_tokens(tmp_path: Path) -> None:
    """NodeRestriction: the review's compromised node claims `tcluster.io/` labels and
    overrides the labels its join token pinned; the master keeps the token's and drops
    the reserved ones, except the features an agent detects (docker, netns)."""
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        await c.join("n1", c.token(labels={"rack": "r1", "tcluster.io/zone": "z1"}))
        claimed = {"rack": "r9", "disk": "ssd", "tcluster.io/gpu": "a100", "tcluster.io/zone": "z9",
                   "tcluster.io/docker": "true"}
        answer = await connect_once(c.agent_address, c.credentials("n1").channel_credentials(), "n1", claimed)
        assert answer.WhichOneof("kind") == "registered"
        assert dict((await c.nodes())["n1"].labels) == {"rack": "r1", "disk": "ssd", "tcluster.io/zone": "z1",
                                                       "tcluster.io/docker": "true"}
    run(scenario, tmp_path)


def test_a_node_certificate_cannot_register_as_another_node(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        await c.join("n1")
        creds = c.credentials("n1").channel_credentials()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await connect_once(c.agent_address, creds, "n2")
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert refused.value.details() == "this certificate is node n1's; it cannot register as 'n2'"
        first = await connect_once(c.agent_address, creds, "n1")      # the same certificate as itself: fine
        assert first.WhichOneof("kind") == "registered"
        assert "n2" not in await c.nodes()
    run(scenario, tmp_path)


def test_the_agent_port_needs_a_client_certificate_and_the_client_port_serves_no_agents(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        await c.join("n1")
        with pytest.raises(grpc.aio.AioRpcError) as no_cert:        # TLS, but no client certificate
            await connect_once(c.agent_address, grpc.ssl_channel_credentials(c.pki.ca_pem), "n1")
        assert no_cert.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await connect_once(c.agent_address, None, "n1")
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as wrong_port:     # a node certificate on the client port
            await connect_once(h.address, c.credentials("n1").channel_credentials(), "n1")
        assert wrong_port.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert await c.nodes() == {}
    run(scenario, tmp_path)


def test_join_tokens_are_single_use_expire_and_must_be_known(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        token = c.token()
        await c.join("n1", token)
        with pytest.raises(JoinError, match=r"UNAUTHENTICATED: join token \w+ was already used \(by node n1\)"):
            await c.join("n2", token)
        expired = c.token(ttl_s=3600, now=time.time() - 7200)
        with pytest.raises(JoinError, match=r"UNAUTHENTICATED: join token \w+ expired at"):
            await c.join("n3", expired)
        unknown = str(JoinTokenText(c.pki.fingerprint, "0123456789ab", "x" * 43))
        with pytest.raises(JoinError, match="UNAUTHENTICATED: unknown join token"):
            await c.join("n4", unknown)
        wrong_secret = token.rsplit(".", 1)[0] + "." + "y" * 43
        with pytest.raises(JoinError, match="UNAUTHENTICATED: join token \\w+: wrong secret"):
            await c.join("n5", wrong_secret)
        for node in ("n2", "n3", "n4", "n5"):
            assert not is_joined(c.state_dir(node))
        assert await c.nodes() == {}
    run(scenario, tmp_path)


def test_join_checks_the_csr_and_the_name_before_spending_the_token(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        token = c.token()
        stub = join_pb2_grpc.NodeJoinStub(h.channel)
        _, csr_n1 = make_node_csr("n1")
        for node, csr, expected in (("n2", csr_n1, "the request's common name is 'node:n1'; it must be 'node:n2'"),
                                    ("bad name", csr_n1, "is not a node name that can join"),
                                    ("n1", b"junk", "not a PEM certificate signing request")):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Join(join_pb2.JoinRequest(token=token, node=node, csr_pem=csr))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in refused.value.details()
        other_ca = init_pki(h.tmp / "other", []).fingerprint
        foreign = str(JoinTokenText(other_ca, *token.split(".")[2:]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Join(join_pb2.JoinRequest(token=foreign, node="n1", csr_pem=csr_n1))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED and "another cluster" in refused.value.details()
        answer = await stub.Join(join_pb2.JoinRequest(token=token, node="n1", csr_pem=csr_n1))  # still unused
        assert answer.node == "n1" and answer.agent_port == h.master.agent_port   # type: ignore[union-attr]
        with pytest.raises(JoinError, match="node n1 already holds a certificate"):
            await c.join("n1", c.token())      # a second machine cannot take a joined name
    run(scenario, tmp_path)


def test_a_revoked_node_is_cut_off_and_cannot_reconnect_until_it_joins_again(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        await c.join("n1")
        old = c.credentials("n1").channel_credentials()
        agent = await c.start_agent("n1")
        assert await asyncio.to_thread(master_main, ["node", "revoke", "n1", "--data-dir", str(h.tmp / "master")]) == 0
        await c.wait_node("n1", DOWN)          # its open stream was closed
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await connect_once(c.agent_address, old, "n1")
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED and "revoked" in refused.value.details()
        assert not agent.agent.registered.is_set()
        agent.task.cancel()
        for name in ("joined.json", "pki/node.key", "pki/node.crt", "pki/ca.crt"):
            (c.state_dir("n1") / name).unlink()
        await c.join("n1")                     # a new token: a new, working certificate
        await c.start_agent("n1")
        await c.wait_node("n1", READY)
    run(scenario, tmp_path)


class _RecordingAgentService(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def Connect(self, request_iterator, context):  # type: ignore[no-untyped-def]
        self.calls += 1
        async for _ in request_iterator:
            yield agent_pb2.MasterMessage(registered=agent_pb2.Registered())
            return


async def _impostor(chain_pem: bytes, key_pem: bytes) -> tuple[grpc.aio.Server, int, _RecordingAgentService]:
    """A server that presents `chain_pem` and would accept any agent."""
    server = grpc.aio.server()
    service = _RecordingAgentService()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(service, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, chain_pem)]))
    await server.start()
    return server, port, service


def test_an_agent_refuses_a_master_whose_certificate_is_not_from_its_ca_or_not_a_master(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        await c.join("n1")
        creds = c.credentials("n1").channel_credentials()
        other = init_pki(tmp_path / "other", [])
        node_key, csr = make_node_csr("evil")
        node_cert = issue_node_cert(c.pki, csr, "evil")          # from the right CA, but a node's
        genuine = await _impostor(c.pki.cert_chain_pem, c.pki.key_pem)     # the control: accepted
        impostors = [await _impostor(other.cert_chain_pem, other.key_pem),
                     await _impostor(node_cert + c.pki.ca_pem, node_key)]
        try:
            assert (await connect_once(f"127.0.0.1:{genuine[1]}", creds, "n1")).WhichOneof("kind") == "registered"
            for server, port, service in impostors:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await connect_once(f"127.0.0.1:{port}", creds, "n1")
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                assert service.calls == 0
            assert genuine[2].calls == 1
            # join too: the token pins the CA before anything is sent
            with pytest.raises(PinMismatch, match="does not present the CA"):
                await asyncio.to_thread(fetch_pinned_ca, f"127.0.0.1:{impostors[0][1]}", c.pki.fingerprint, 5.0)
            with pytest.raises(PinMismatch, match="does not present the CA"):
                from tcluster.agent.joinclient import join
                await join(f"127.0.0.1:{impostors[0][1]}", c.token(), "n9", c.state_dir("n9"))
            assert not is_joined(c.state_dir("n9"))
        finally:
            for server, _, _ in [genuine, *impostors]:
                await server.stop(0)
    run(scenario, tmp_path)
