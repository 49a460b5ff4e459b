"""Node operations are admin-only on a secure master (README, "Node operations"): a user's
OperateNodes is refused with PERMISSION_DENIED and changes nothing; an admin's is written
with the admin's name as who. (An insecure master's anonymous caller is an admin: the e2e
tests drive it that way.)"""

from __future__ import annotations

from pathlib import Path

import grpc

from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run
from tests.component.test_users_authz import auth, code_of, secure_master


def test_only_admins_operate_nodes(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        t = await secure_master(h)
        cordon = jobs_pb2.OperateNodesRequest(op="cordon", nodes=["n1"], reason="disk")
        code, why = await code_of(h.cluster.OperateNodes(cordon, metadata=auth(t["alice"])))
        assert (code, why) == (grpc.StatusCode.PERMISSION_DENIED,
                               "user alice may not cordon nodes: node operations are for admins")
        listed = await h.cluster.ListNodes(jobs_pb2.ListNodesRequest(), metadata=auth(t["alice"]))
        assert [(n.name, n.state, n.ops.state) for n in listed.nodes] == [("n1", "READY", "READY")]
        done = await h.cluster.OperateNodes(cordon, metadata=auth(t["admin"]))
        assert [(n.name, n.state, n.ops.by, n.ops.reason) for n in done.nodes] == [("n1", "CORDONED", "admin", "disk")]
        code, why = await code_of(h.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="uncordon", nodes=["n1"]),
                                                         metadata=auth(t["bob"])))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        code, why = await code_of(h.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="cordon", nodes=["n9"]),
                                                         metadata=auth(t["admin"])))
        assert code == grpc.StatusCode.NOT_FOUND and "n9" in why
        code, _ = await code_of(h.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="reboot", nodes=["n1"]),
                                                       metadata=auth(t["admin"])))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        code, why = await code_of(h.cluster.OperateNodes(
            jobs_pb2.OperateNodesRequest(op="cordon", nodes=["n1"], reason="x" * 5000), metadata=auth(t["admin"])))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and why.startswith("reason: is 5000 characters")
    run(scenario, tmp_path)
