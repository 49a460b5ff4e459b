"""Review finding 1: a client that stops reading a followed log cannot grow the master's
memory, and a user cannot open more log streams than the master's cap."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from testkit.faultcluster import Cluster, wait_for
from tcluster.v1 import jobs_pb2

pytestmark = pytest.mark.system
MiB = 2**20
WATCH_S = 15.0                       # at 4 MiB/s an unbounded master would grow ~60 MiB
GROWTH_BOUND = 32 * MiB              # window 512 KiB + gRPC's buffers; far below the leak
FOLLOWS_PER_USER = 8                 # the master's default --log-streams-per-user
WRITER = ("import sys, time\nb = b'x' * (1 << 20)\n"
          "while True:\n    sys.stdout.buffer.write(b); sys.stdout.flush(); time.sleep(0.25)")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)   # the master's memory; the store plays no part
def test_a_stalled_follow_holds_the_master_bounded_and_the_cap_refuses_one_more(cluster: Cluster) -> None:
    """Proves, through a real master and agent: a task writes 4 MiB/s; a client follows its
    log, reads one chunk and stops reading. For 15 s the master's RSS grows less than
    32 MiB (before: by the task's whole output, ~60 MiB) and the node stays READY
    (heartbeats are not held behind log data). Then the same user opens follows up to the
    cap; one more gets RESOURCE_EXHAUSTED naming the cap; the others keep working."""
    cluster.start_master()
    a = cluster.start_agent("logflow")
    job_id = cluster.submit("python3", "-c", WRITER, log_max="8Mi", mem="128Mi")
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    assert cluster.master is not None
    pid = cluster.master.popen.pid
    request = jobs_pb2.LogsRequest(job_id=job_id, follow=True, tail_bytes=1)
    streams = [cluster.jobs.Logs(request)]
    try:
        next(streams[0])                                   # one chunk, then this client reads nothing
        before, top = rss(pid), 0
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            top = max(top, rss(pid))
            assert cluster.nodes()[a.name]["state"] == "READY"
            time.sleep(0.5)
        print(f"master RSS grew {(top - before) / MiB:.1f} MiB in {WATCH_S:.0f} s with a stalled follow")
        assert top - before < GROWTH_BOUND, f"master RSS grew {(top - before) / MiB:.0f} MiB"
        for _ in range(FOLLOWS_PER_USER - 1):
            streams.append(cluster.jobs.Logs(request))
            next(streams[-1])
        with pytest.raises(grpc.RpcError) as refused:
            next(cluster.jobs.Logs(request))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"{FOLLOWS_PER_USER} log streams open" in refused.value.details()
        assert "--log-streams-per-user" in refused.value.details()
        assert next(streams[-1]) is not None               # the open ones still flow
    finally:
        for stream in streams:
            stream.cancel()
    wait_for(lambda: _follow_opens(cluster, request), 10, "a follow opens again once the others closed")


def _follow_opens(cluster: Cluster, request: jobs_pb2.LogsRequest) -> bool:
    stream = cluster.jobs.Logs(request)
    try:
        next(stream)
        return True
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
        return False
    finally:
        stream.cancel()
