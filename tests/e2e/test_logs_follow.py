"""`tcl logs -f` when the path to the master goes silent (its host powered off, a
partition): no FIN or RST arrives, and a quiet task sends nothing, so the stream used to
wait forever. Keepalive pings end it with an error; the task itself is untouched."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, leaked_cgroups, tcl, wait_job
from testkit.proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
# keepalive: a ping every 10 s, its answer awaited 5 s (tcluster/domain/bounds.py); generous here
FOLLOW_ENDS_WITHIN_S = 90


def test_logs_follow_ends_with_an_error_when_the_master_goes_silent(tmp_path: Path) -> None:
    node = f"e2e-follow-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "master"),
                   "--heartbeat-interval-s", "0.5"], tmp_path / "master.log")
    agent = follow = proxy = None
    address = job = ""
    try:
        port = int(master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1))
        address = f"127.0.0.1:{port}"
        agent = Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node, "--runtime", "cgroup1",
                      "--state-dir", str(tmp_path / node)], tmp_path / "agent.log")
        agent.wait_for_output(r"registered with")
        job = tcl(address, "submit", "--cpu", "0.1", "--mem", "64Mi", "--", "sh", "-c",
                  "echo started; exec sleep 300").stdout.strip()
        wait_job(address, job, {"RUNNING"})
        proxy = TcpProxy(("127.0.0.1", port))
        follow = Proc([str(BIN / "tcl"), "--master", proxy.address, "logs", "-f", job], tmp_path / "follow.log")
        follow.wait_for_output(r"started")
        proxy.cut("blackhole")          # held open, nothing forwarded either way
        try:
            code = follow.popen.wait(FOLLOW_ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"tcl logs -f still waiting {FOLLOW_ENDS_WITHIN_S} s after the cut:\n"
                                 f"{follow.output()}") from None
        assert code == 1 and "error: " in follow.output(), follow.output()     # grpc's words: "ping timeout"
        assert wait_job(address, job, {"RUNNING"})["state"] == "RUNNING"     # only the client's path was cut
    finally:
        if job:
            tcl(address, "cancel", job, check=False)
            wait_job(address, job, {"CANCELLED"})
        for proc in (follow, agent, master):
            if proc is not None:
                proc.stop()
        if proxy is not None:
            proxy.close()
    assert leaked_cgroups(node) == []
