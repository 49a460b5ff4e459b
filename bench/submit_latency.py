"""Submit-to-running latency: a master and one agent (real binaries), N jobs submitted
one after another; for each, the time from the master accepting it (submitted_at) to
the task's process running in its container (started_at, stamped by the agent when the
exec succeeded). Runtimes are measured side by side in one run and compared.

    .venv/bin/python bench/submit_latency.py --jobs 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from testkit.procs import BIN, Proc, cgroup_v1_usable, sweep_node  # noqa: E402
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def measure(runtime: str, jobs: int, tmp: Path) -> list[float]:
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / runtime / "m")],
                  tmp / f"{runtime}-master.log")
    address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
    node = f"bench-{runtime}-{os.getpid()}"
    agent = Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node,
                  "--runtime", runtime, "--state-dir", str(tmp / runtime / "a"), "--cpus", "2", "--memory", "4Gi"],
                 tmp / f"{runtime}-agent.log")
    latencies = []
    try:
        agent.wait_for_output("registered with")
        stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(address))
        for i in range(jobs):
            spec = jobs_pb2.JobSpec(command=["true"], tasks=1)
            spec.resources.cpu, spec.resources.memory = 0.1, 64 * 2**20
            job_id = stub.Submit(jobs_pb2.SubmitRequest(spec=spec)).id
            while (job := stub.Get(jobs_pb2.GetJobRequest(id=job_id))).tasks[0].started_at == 0:
                time.sleep(0.001)
            latencies.append(job.tasks[0].started_at - job.submitted_at)
            while stub.Get(jobs_pb2.GetJobRequest(id=job_id)).state != jobs_pb2.JOB_SUCCEEDED:
                time.sleep(0.001)   # drained: one job at a time, and nothing left at the end
            print(f"\r{runtime}: {i + 1}/{jobs}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    finally:
        agent.stop()
        master.stop()
        if runtime != "process":
            sweep_node(node, tmp / runtime / "a")
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    args = parse_quick(parser, {"jobs": 5})
    runtimes = ["process"] + (["cgroup1"] if cgroup_v1_usable() is None else [])
    with tempfile.TemporaryDirectory(prefix="tcl-bench-") as tmp:
        results = {rt: measure(rt, args.jobs, Path(tmp)) for rt in runtimes}
    print(f"submit-to-running latency over {args.jobs} jobs each (ms)")
    print(f"{'runtime':10} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8} {'mean':>8}")
    for rt, values in results.items():
        ms = [v * 1000 for v in values]
        print(f"{rt:10} {percentile(ms, 50):8.1f} {percentile(ms, 90):8.1f} {percentile(ms, 99):8.1f} "
              f"{max(ms):8.1f} {statistics.mean(ms):8.1f}")
    if "cgroup1" in results:
        ratio = statistics.median(results["cgroup1"]) / statistics.median(results["process"])
        print(f"p50 ratio cgroup1/process (cost of the container setup): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
