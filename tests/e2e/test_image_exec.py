"""Issue 34 for image tasks through the binaries: `tcl exec` into a task started with
`--image` (its container's cgroups and namespaces, user, working directory, stdin and exit
code, as `docker exec` gives), a job script run in the image, and output files refused
with the reason. One private dockerd (bench/dockerd.py), master and docker agent for the
module; skipped with the reason where dockerd cannot start."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.dockerd import Dockerd
from testkit.procs import BIN, Proc, cgroup_v1_usable, sweep_node, start_agent, start_master, tcl, wait_job

ROOT_WHY = cgroup_v1_usable()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(ROOT_WHY is not None, reason=str(ROOT_WHY))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
PROBE = 'while read -r k v; do case $k in Uid:|CapEff:) echo "$k $v";; esac; done < /proc/self/status'


@dataclass
class ImageCluster:
    address: str
    node: str
    image: str
    setuid_image: str         # the image plus a setuid-root busybox (bench/dockerd.py)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, docker_engine: Dockerd) -> Iterator[ImageCluster]:
    engine = docker_engine              # the session's private dockerd (testkit/docker_engine.py)
    tmp = tmp_path_factory.mktemp("image-exec")
    node = f"e2e-dkx-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    master: Proc | None = None
    agent: Proc | None = None
    try:
        master, address = start_master(tmp)
        agent = start_agent(tmp, address, node, "--runtime", "cgroup1", "--cpus", "2", "--memory", "2Gi",
                            "--heartbeat-interval-s", "0.5", "--docker-host", engine.url)
        yield ImageCluster(address, node, engine.image, engine.import_setuid_image())
    finally:
        if agent is not None:
            agent.stop()
        if master is not None:
            master.stop()
        sweep_node(node, tmp / node)


def test_exec_into_an_image_task_is_docker_exec(cluster: ImageCluster) -> None:
    job = tcl(cluster.address, "submit", "--image", cluster.setuid_image, "--user", "nobody", "--workdir", "/srv",
              "--cpu", "0.1", "--mem", "64Mi", "--", "sleep", "600").stdout.strip()
    try:
        wait_job(cluster.address, job, {"RUNNING"} | DONE, timeout_s=90)
        got = tcl(cluster.address, "exec", job, "--", "sh", "-c",
                  "cat /proc/self/cgroup; echo ---; cat /proc/1/cgroup; echo ---; "
                  "while read -r k v r; do [ $k = Uid: ] && echo $v; done < /proc/self/status; pwd; "
                  "echo to-stderr >&2; exit 7", check=False)
        assert got.returncode == 7, got.stderr
        mine, init, rest = got.stdout.split("---\n")
        assert mine == init and f"/tcluster/{cluster.node}.docker/" in mine, got.stdout   # the container's
        assert rest.split() == ["65534", "/srv"]           # the task's user and working directory
        assert got.stderr == "to-stderr\n"
        init_cmd = tcl(cluster.address, "exec", job, "--", "cat", "/proc/1/cmdline", check=False)
        assert init_cmd.stdout == "sleep\0" "600\0", init_cmd    # PID 1 of the container's own PID namespace
        echoed = subprocess.run([str(BIN / "tcl"), "--master", cluster.address, "exec", "-i", job, "--", "cat"],
                                input="x" * 100_000, capture_output=True, text=True, timeout=120)
        assert echoed.returncode == 0 and len(echoed.stdout) == 100_000, echoed.stderr   # stdin relayed
        # a setuid-root file in the image gives an exec'd command nothing (no_new_privs, as the task)
        suid = tcl(cluster.address, "exec", job, "--", "/bin/busybox-suid", "ash", "-c", PROBE, check=False)
        # busybox-suid's attempt to become root fails (it reads its config, then asks for gid 0)
        assert suid.returncode == 1 and "setresgid: Operation not permitted" in suid.stderr, suid
        assert "Uid: 0" not in suid.stdout
        missing = tcl(cluster.address, "exec", job, "--", "no-such-command-here", check=False)
        assert missing.returncode == 127 and "not found in the task's PATH" in missing.stderr
    finally:
        tcl(cluster.address, "cancel", job, check=False)
    wait_job(cluster.address, job, DONE, timeout_s=60)
    ended = tcl(cluster.address, "exec", job, "--", "true", check=False)
    assert ended.returncode == 1, ended                     # the master's or (its end not yet heard) the node's
    assert "RUNNING task only" in ended.stderr or "is not running on this node" in ended.stderr, ended.stderr


def test_a_script_runs_in_the_image_and_output_files_are_refused_with_the_reason(
        cluster: ImageCluster, tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n#TCL --cpu 0.1 --mem 32Mi\n"
                      f"#TCL --image {cluster.image}\n"
                      'echo "script $0 args $*"; id -u; cat /proc/self/cgroup\n')
    job = tcl(cluster.address, "submit", "--user", "nobody", str(script), "one", "two",
              cwd=str(tmp_path)).stdout.strip()
    done = wait_job(cluster.address, job, DONE, timeout_s=90)
    logs = tcl(cluster.address, "logs", job).stdout.splitlines()
    assert done["state"] == "SUCCEEDED", (done, logs)
    assert logs[:2] == ["script /.tcl-job-script args one two", "65534"], logs
    assert f"/tcluster/{cluster.node}.docker/" in "\n".join(logs[2:]), logs     # in the container
    refused = tcl(cluster.address, "submit", "--image", cluster.image, "--stdout-file", "out-%j.txt", "--",
                  "true", check=False)
    assert refused.returncode == 2                          # tcl checks the spec as the master does
    assert "--stdout-file/--stderr-file cannot be used with --image" in refused.stderr, refused.stderr
