"""Megha's federation through the real binaries (issue 25): two LMs (each a tcl-master with
--federation-lm-id and two real cgroup v1 agents) and two GMs (tcl-gm) on loopback. Jobs of
two users' queues (a -> gm0, b -> gm1, b submitted through gm0 and forwarded) run on both
clusters, each task once; a GM SIGKILLed mid-burst and restarted on its state dir places
every task exactly once and its job still ends (ends it missed are read from the LMs); an LM
cut off (SIGSTOP) ages out of the GMs' views, new work goes to the other LM, and its
running task is untouched; healed (SIGCONT), it gets new work again; the `tcl --federation`
binary submits, lists, shows, cancels (the LM jobs end cancelled) and reports the
federation's status."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from testkit.procs import BIN, Proc, cancel_every_job, cgroup_v1_usable, leaked_cgroups, wait_until
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2, jobs_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
FED_TASK = "tcluster.io/federation-task"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Federation:
    def __init__(self, tmp: Path, gm_args: tuple[str, ...] = ()) -> None:
        self.tmp, self.tag = tmp, f"e2e-fed-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.gm_args = gm_args
        self.masters: list[Proc] = []
        self.addresses: list[str] = []
        self.agents: list[Proc] = []
        self.nodes: list[str] = []
        for i in range(2):
            m = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / f"m{i}"),
                      "--federation-lm-id", str(i), "--federation-gms", "2", "--federation-state-interval-s", "1",
                      "--heartbeat-interval-s", "0.5"], tmp / f"m{i}.log")
            self.masters.append(m)
            self.addresses.append("127.0.0.1:" + m.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1))
        for i, address in enumerate(self.addresses):
            for n in "ab":
                node = f"{self.tag}-{i}{n}"
                agent = Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node, "--runtime", "cgroup1",
                              "--cpus", "2", "--memory", "2Gi", "--state-dir", str(tmp / node)], tmp / f"{node}.log")
                agent.wait_for_output(r"registered with")
                self.agents.append(agent)
                self.nodes.append(node)
        self.gm_ports = [_port(), _port()]
        self.gms: list[Proc | None] = [None, None]
        for g in range(2):
            self.start_gm(g)

    def start_gm(self, g: int) -> None:
        lms = ",".join(f"lm{i}={a}" for i, a in enumerate(self.addresses))
        gms = ",".join(f"gm{k}=127.0.0.1:{p}" for k, p in enumerate(self.gm_ports))
        gm = Proc([str(BIN / "tcl-gm"), "--name", f"gm{g}", "--index", str(g), "--listen",
                   f"127.0.0.1:{self.gm_ports[g]}", "--lms", lms, "--gms", gms, "--queue-map", "a=gm0,b=gm1",
                   "--state-dir", str(self.tmp / f"gm{g}"), "--view-max-age-s", "3", *self.gm_args], self.tmp / f"gm{g}.{time.time()}.log")
        gm.wait_for_output(r"serving on port")
        self.gms[g] = gm

    def gm(self, g: int) -> federation_pb2_grpc.GlobalManagerServiceStub:
        return federation_pb2_grpc.GlobalManagerServiceStub(grpc.insecure_channel(f"127.0.0.1:{self.gm_ports[g]}"))

    def submit(self, g: int, queue: str, tasks: int, *command: str, cpu: float = 0.25) -> str:
        spec = jobs_pb2.JobSpec(queue=queue, tasks=tasks, command=list(command), name=f"fed-{queue}",
                                resources=common_pb2.Resources(cpu=cpu, memory=32 * 2**20))
        return self.gm(g).Submit(fpb.FedSubmitRequest(spec=spec), timeout=30).id

    def job(self, job_id: str) -> fpb.FedJob:
        for g in range(2):
            try:
                return self.gm(g).Get(fpb.FedGetRequest(id=job_id), timeout=10)
            except grpc.RpcError:
                continue
        raise AssertionError(f"no GM answers for {job_id}")

    def wait_job(self, job_id: str, timeout_s: float = 90) -> fpb.FedJob:
        wait_until(lambda: self.job(job_id).state in TERMINAL, timeout_s)
        return self.job(job_id)

    def lm_jobs(self, lm: int) -> list[jobs_pb2.Job]:
        stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(self.addresses[lm]))
        return list(stub.List(jobs_pb2.ListJobsRequest(all=True), timeout=10).jobs)

    def launches(self, job_id: str, lms: tuple[int, ...] = (0, 1)) -> collections.Counter[str]:
        return collections.Counter(j.spec.labels[FED_TASK] for lm in lms for j in self.lm_jobs(lm)
                                   if j.spec.labels.get(FED_TASK, "").startswith(job_id + "."))

    def close(self) -> None:
        for gm in self.gms:
            if gm is not None:
                gm.stop()
        for i, m in enumerate(self.masters):
            os.kill(m.popen.pid, signal.SIGCONT)
            try:
                cancel_every_job(self.addresses[i])
            finally:
                pass
        for agent in self.agents:
            agent.stop()
        for m in self.masters:
            m.stop()
        assert [c for n in self.nodes for c in leaked_cgroups(n)] == []


@pytest.fixture
def fed(tmp_path: Path) -> Iterator[Federation]:
    f = Federation(tmp_path)
    try:
        yield f
    finally:
        f.close()


# A federated array's task: when it ran (start, end) and who it is (issue 35, --array %N).
ARRAY_TASK = ('echo "$(date +%s.%N) $TCL_JOB_ID $TCL_TASK_INDEX $TCL_ARRAY_TASK_ID $TCL_TASK_COUNT" '
              '> "$0/$TCL_TASK_INDEX.start"; sleep 1; date +%s.%N > "$0/$TCL_TASK_INDEX.end"')


def _task_dir() -> Path:
    """Outside /tmp (a task's /tmp is its own), writable by the tasks."""
    seen = Path("/var/tmp") / f"tcl-e2e-fed-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    seen.mkdir(mode=0o777)
    seen.chmod(0o777)
    return seen


def test_two_queues_run_on_both_clusters_each_task_once(fed: Federation) -> None:
    seen = _task_dir()
    try:
        a = fed.submit(0, "a", 6, "sh", "-c", "exit 0")
        b = fed.submit(0, "b", 6, "sh", "-c", "exit 0")          # gm1's queue: forwarded
        assert b.startswith("f1-"), b
        # An array of 8 with %2 through `tcl --federation submit` (issue 35).
        array = tcl(fed, "submit", "--queue", "a", "--array", "0-7%2", "--cpu", "0.1", "--mem", "32Mi",
                    "--", "sh", "-c", ARRAY_TASK, str(seen))
        assert array.returncode == 0, array.stderr
        too_wide = tcl(fed, "submit", "--queue", "a", "--array", "0-7%9", "--cpu", "0.1", "--mem", "32Mi",
                       "--", "true")
        assert too_wide.returncode != 0 and "spec.array: %9 is more than the array's 8" in too_wide.stderr, \
            too_wide.stderr
        for job_id, gm in ((a, "gm0"), (b, "gm1")):
            job = fed.wait_job(job_id)
            assert (job.state, job.gm) == ("SUCCEEDED", gm), job
            assert {t.lm for t in job.tasks} == {"lm0", "lm1"}, job       # both clusters
            assert all(t.exit_code == 0 and t.job_id for t in job.tasks)
            launches = fed.launches(job_id)
            assert len(launches) == 6 and set(launches.values()) == {1}, launches
        _check_throttled_array(fed, array.stdout.strip(), seen)
    finally:
        shutil.rmtree(seen, ignore_errors=True)


def _check_throttled_array(fed: Federation, job_id: str, seen: Path) -> None:
    """Each index 0-7 ran once, saw its index and the federated job, and at no moment did
    more than 2 run (each task's own start and end times, one clock)."""
    job = fed.wait_job(job_id, timeout_s=120)
    assert job.state == "SUCCEEDED" and sorted(t.index for t in job.tasks) == list(range(8)), job
    assert set(fed.launches(job_id).values()) == {1} and len(fed.launches(job_id)) == 8
    runs = []
    for i in range(8):
        start, job_seen, index, array_index, count = (seen / f"{i}.start").read_text().split()
        assert (job_seen, index, array_index, count) == (job_id, str(i), str(i), "8")
        runs.append((float(start), float((seen / f"{i}.end").read_text())))
    most = max(sum(s <= t < e for s, e in runs) for t, _ in runs)
    print(f"federated array 0-7%2: at most {most} tasks ran at once")
    assert most <= 2, sorted(runs)


# Each federated task writes who it is into a file of its own (issue 35: task identity).
IDENTITY = ('echo "$TCL_JOB_ID $TCL_TASK_INDEX $TCL_TASK_COUNT $TCL_ATTEMPT $TCL_LM_JOB_ID $TCL_FEDERATION_GM" '
            '> "$0/$TCL_TASK_INDEX.$TCL_LM_JOB_ID"; sleep 1')


def test_a_gm_killed_mid_burst_places_each_task_once_and_its_job_ends(fed: Federation) -> None:
    seen = _task_dir()
    try:
        sweep = fed.submit(0, "a", 16, "sh", "-c", IDENTITY, str(seen), cpu=0.1)
        job_id = fed.submit(0, "a", 40, "sleep", "1", cpu=0.1)
        time.sleep(0.3)
        assert fed.gms[0] is not None
        fed.gms[0].stop(signal.SIGKILL)
        fed.start_gm(0)
        job = fed.wait_job(job_id, timeout_s=120)
        launches = fed.launches(job_id)
        print(f"GM SIGKILL mid-burst: {len(launches)} tasks, {sum(launches.values())} LM jobs, job {job.state}")
        assert job.state == "SUCCEEDED", collections.Counter(t.state for t in job.tasks)
        assert len(launches) == 40 and set(launches.values()) == {1}, launches
        swept = fed.wait_job(sweep, timeout_s=120)
        assert swept.state == "SUCCEEDED", collections.Counter(t.state for t in swept.tasks)
        lm_jobs = {t.index: t.job_id for t in swept.tasks}
        files = sorted(f.name for f in seen.iterdir())
        # Indexes 0-15 exactly once, each from the LM job the GM says ran it.
        assert files == sorted(f"{i}.{lm_jobs[i]}" for i in range(16)), files
        for i in range(16):
            job_seen, index, count, attempt, lm_job, gm = (seen / f"{i}.{lm_jobs[i]}").read_text().split()
            assert (job_seen, index, count, lm_job, gm) == (sweep, str(i), "16", lm_jobs[i], "gm0")
            assert attempt.isdigit()
    finally:
        shutil.rmtree(seen, ignore_errors=True)


def test_an_lm_cut_off_ages_out_and_its_running_task_is_untouched(fed: Federation) -> None:
    long = fed.submit(0, "a", 2, "sleep", "300")              # one task on each LM
    wait_until(lambda: [t.state for t in fed.job(long).tasks] == ["RUNNING"] * 2, 60)
    on_lm1 = [t for t in fed.job(long).tasks if t.lm == "lm1"]
    assert on_lm1, fed.job(long)
    os.kill(fed.masters[1].popen.pid, signal.SIGSTOP)
    cut = time.monotonic()
    try:
        time.sleep(5)                                          # past --view-max-age-s 3
        after = fed.submit(0, "a", 4, "sh", "-c", "exit 0")
        job = fed.wait_job(after, timeout_s=60)
        assert job.state == "SUCCEEDED" and {t.lm for t in job.tasks} == {"lm0"}, job
        print(f"LM cut off: new work all on lm0 {time.monotonic() - cut:.1f} s after the SIGSTOP")
    finally:
        os.kill(fed.masters[1].popen.pid, signal.SIGCONT)
    healed = time.monotonic()
    task = [t for t in fed.job(long).tasks if t.lm == "lm1"][0]
    assert (task.state, task.job_id) == ("RUNNING", on_lm1[0].job_id), task      # untouched
    assert fed.launches(long)[f"{long}.{task.index}"] == 1
    # Healed: lm1's stream answers again, its view is fresh, and new work reaches it again
    # (8 one-core tasks: more than gm0's partitions on lm0 hold at once, so both LMs are used).
    wait_until(lambda: all(lm.connected and lm.view_age_s < 3 for lm in
                           fed.gm(0).Status(fpb.FedStatusRequest(), timeout=10).lms), 30)
    again = fed.submit(0, "a", 8, "sleep", "1", cpu=1.0)
    try:
        job = fed.wait_job(again, timeout_s=90)
    except AssertionError as e:      # say where each task is and how gm0 sees the LMs
        raise AssertionError(f"{e}: {fed.job(again)}\n{fed.gm(0).Status(fpb.FedStatusRequest(), timeout=10)}") from e
    assert job.state == "SUCCEEDED" and "lm1" in {t.lm for t in job.tasks}, job
    print(f"LM healed: placed on lm1 again, job done {time.monotonic() - healed:.1f} s after the SIGCONT")
    assert set(fed.launches(again).values()) == {1}


def tcl(fed: Federation, *args: str, output: str = "table") -> subprocess.CompletedProcess[str]:
    gms = ",".join(f"127.0.0.1:{p}" for p in fed.gm_ports)
    return subprocess.run([str(BIN / "tcl"), "--federation", gms, "-o", output, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TCL_FEDERATION": ""})


def tcl_json(fed: Federation, *args: str) -> object:
    out = tcl(fed, *args, output="json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_tcl_federation_cli_submits_lists_shows_cancels_and_reports(fed: Federation) -> None:
    long = tcl(fed, "submit", "--queue", "b", "--tasks", "2", "--cpu", "0.25", "--mem", "32Mi", "--name", "long",
               "--", "sleep", "300")
    assert long.returncode == 0 and long.stdout.strip().startswith("f1-"), long.stderr      # forwarded to gm1
    long_id = long.stdout.strip()
    short = tcl_json(fed, "submit", "--queue", "a", "--cpu", "0.25", "--mem", "32Mi", "--", "sh", "-c", "exit 0")
    assert short["gm"] == "gm0" and short["state"] in ("PENDING", "RUNNING"), short
    refused = tcl(fed, "submit", "--gpus", "1", "--", "true")
    assert refused.returncode == 2 and "--gpus" in refused.stderr, refused.stderr
    missing = tcl(fed, "status", "f0-999")
    assert missing.returncode == 1 and "f0-999" in missing.stderr, missing.stderr

    wait_until(lambda: [t["state"] for t in tcl_json(fed, "status", long_id)["tasks"]] == ["RUNNING"] * 2, 60)
    wait_until(lambda: tcl_json(fed, "status", short["id"])["state"] == "SUCCEEDED", 60)
    listed = tcl_json(fed, "list")
    assert [j["id"] for j in listed] == [short["id"], long_id], listed        # both GMs', newest first
    table = tcl(fed, "list", "--queue", "b")
    assert table.returncode == 0 and long_id in table.stdout and short["id"] not in table.stdout
    shown = tcl(fed, "status", long_id)
    assert shown.returncode == 0 and "RUNNING" in shown.stdout and "lm" in shown.stdout, shown.stdout

    status = tcl_json(fed, "federation", "status")
    assert [(g["name"], g["alive"]) for g in status["gms"]] == [("gm0", True), ("gm1", True)], status
    assert sorted((lm["seen_by"], lm["name"], lm["connected"], lm["nodes"]) for lm in status["lms"]) == [
        ("gm0", "lm0", True, 2), ("gm0", "lm1", True, 2), ("gm1", "lm0", True, 2), ("gm1", "lm1", True, 2)]
    assert tcl(fed, "federation", "status").stdout.startswith("GM ")

    cancelled = tcl(fed, "cancel", long_id)
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until(lambda: tcl_json(fed, "status", long_id)["state"] == "CANCELLED", 60)
    lm_jobs = {t["lm_job"] for t in tcl_json(fed, "status", long_id)["tasks"]}
    ended = {j.id: j.state for lm in (0, 1) for j in fed.lm_jobs(lm) if j.id in lm_jobs}
    assert set(ended.values()) == {jobs_pb2.JOB_CANCELLED} and len(ended) == 2, ended
    again = tcl(fed, "cancel", long_id)
    assert again.returncode == 0 and again.stdout.strip() == "CANCELLED", again.stdout


def test_with_preemption_queue_b_takes_its_share_from_a_whose_tasks_run_again(tmp_path: Path) -> None:
    """Alg. 2 through the binaries: a (gm0) fills both clusters (8 x 1 core); b (gm1, an
    equal share) preempts two of a's tasks, which wait PENDING at gm0 with why and run
    again, once each, when b's tasks end."""
    fed = Federation(tmp_path, ("--preemption",))
    try:
        a = fed.submit(0, "a", 8, "sleep", "600", cpu=1)
        wait_until(lambda: [t.state for t in fed.job(a).tasks] == ["RUNNING"] * 8, 60)
        b = fed.submit(1, "b", 2, "sleep", "3", cpu=1)
        wait_until(lambda: [t.state for t in fed.job(b).tasks] == ["RUNNING"] * 2, 60)
        preempted = [t for t in fed.job(a).tasks if t.preemptions]
        assert len(preempted) == 2 and all(t.reason.startswith(f"preempted by {b}.") and
                                           t.reason.endswith("of queue b") for t in preempted), fed.job(a)
        assert fed.gm(1).Status(fpb.FedStatusRequest(), timeout=10).gms[0].preemptions == 2    # the preemptor's count
        assert fed.wait_job(b).state == "SUCCEEDED"
        wait_until(lambda: [t.state for t in fed.job(a).tasks] == ["RUNNING"] * 8, 60)
        launches = fed.launches(a)
        assert sorted(launches.values()) == [1] * 6 + [2] * 2, launches      # never two at once, none lost
        wait_until(lambda: sum(j.state == jobs_pb2.JOB_RUNNING for lm in (0, 1) for j in fed.lm_jobs(lm)) == 8, 30)
    finally:
        fed.close()
