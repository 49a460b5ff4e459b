"""The TCluster paper's section 5.1, reproduced through a real master and agent on this
host's cgroups (v1 here, v2 in tests/vm):

- Figure 3: four CPU-bound jobs with CPU requests 8:4:2:1 (the 8 one multi-process), all
  made to compete on one core, get CPU time in that ratio (±10%, at least ±1 point of the
  core), as measured from the agent's own usage reports and checked against /proc/<pid>/stat
  over the same window (the node frozen while both are read).
- Figure 4: a hog limited to 500 MiB never exceeds it; with swap limited too it is
  OOM-killed, and `tcl status` says OOMKilled.
- Figure 5: a fork bomb stays within pids.max while heartbeats keep coming and the host
  can still fork; cancelling it leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from tcluster.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from testkit.procs import tcl_quick as tcl
from testkit.cgroups import MODE, SKIP_REASON, alive, group_dirs, leftovers
from tests.system.cluster import (cluster, job, nodes, proc_cpu_seconds, submit, task_key, task_pids,
                                  wait_state)

pytestmark = [pytest.mark.system, pytest.mark.guest, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
MI = 2**20
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
SPIN = "while :; do :; done"
WINDOW_S = 6.0


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One master and one agent (4 cores, 4 GiB) for the three figures, in turn: under the
    guest's emulation a daemon's start is most of a figure's time. Each figure waits for its
    own jobs' ends and cgroups; the cluster checks at the end that nothing is left."""
    with cluster(tmp_path_factory.mktemp("figures"), "figs", "--cpus", "4", "--memory", "4Gi") as (master, node, _):
        yield master, node


def _nothing_left(node: str) -> None:
    """The node has no task cgroup left once the figure's jobs have ended (the agent removes
    a task's groups as it reports its end; a bound, not a measure)."""
    def task_groups() -> list[Path]:
        return [d for node_dir in leftovers(node) for d in node_dir.iterdir() if d.is_dir()]
    deadline = time.monotonic() + 60
    while task_groups():
        assert time.monotonic() < deadline, f"left behind: {task_groups()}"
        time.sleep(0.1)


def _tasks(stub: jobs_pb2_grpc.JobServiceStub, jobs: list[str]) -> list[jobs_pb2.Task]:
    """Each job's task as the master has it, read over gRPC in-process: a `tcl` subprocess
    per read would take seconds under software emulation, on the one core left free."""
    return [stub.Get(jobs_pb2.GetJobRequest(id=j), timeout=10).tasks[0] for j in jobs]


def _freeze(node: str, on: bool) -> float:
    """Freeze (or thaw) the node's whole group, every task in it at once, and return
    time.monotonic() once the kernel says it is done (freezer.state on v1, cgroup.events
    on v2). While frozen no task runs, so the agent's sample and /proc agree exactly."""
    groups = [d for d in group_dirs(node) if (d / "freezer.state").exists() or (d / "cgroup.freeze").exists()]
    if not groups and not on:
        return time.monotonic()             # nothing to thaw: the node's group is gone
    (group,) = groups
    v1 = (group / "freezer.state").exists()
    if v1:
        (group / "freezer.state").write_text("FROZEN" if on else "THAWED")
    else:
        (group / "cgroup.freeze").write_text("1" if on else "0")
    deadline = time.monotonic() + 120
    while True:
        state = ((group / "freezer.state").read_text().strip() == "FROZEN" if v1 else
                 "frozen 1" in (group / "cgroup.events").read_text().splitlines())
        if state == on:
            return time.monotonic()
        assert time.monotonic() < deadline, f"{group} not {'frozen' if on else 'thawed'} after 120 s"
        time.sleep(0.01)


def _next_samples(stub: jobs_pb2_grpc.JobServiceStub, jobs: list[str], after: list[float]) -> list[jobs_pb2.Task]:
    """Each job's task once the agent has reported a sample taken after `after` (per job)."""
    deadline = time.monotonic() + 120          # a bound, not a measure: heartbeats come every 0.5 s
    while True:
        found = _tasks(stub, jobs)
        if all(t.usage.sampled_at > a for t, a in zip(found, after)):
            return found
        assert time.monotonic() < deadline, f"no new usage sample in 120 s: {[t.usage for t in found]}"
        time.sleep(0.05)


def _frozen_snapshot(stub: jobs_pb2_grpc.JobServiceStub, node: str, jobs: list[str]) -> tuple[list[float], list[float]]:
    """With the node frozen: the agent-reported cpu_seconds of each job's task, from a
    sample the agent read while frozen, and /proc's utime + stime of the same processes.
    No CPU is used between the two readings, however loaded or slow the host is: the
    agent's sample (taken after the one stamped after the freeze, so its files were read
    after it) and /proc count the same CPU time to the tick."""
    frozen_at = time.time()
    first = _next_samples(stub, jobs, [frozen_at] * len(jobs))
    found = _next_samples(stub, jobs, [t.usage.sampled_at for t in first])
    procs = [proc_cpu_seconds(task_pids(node, f"{t.id}.{t.attempt}")) for t in found]
    return [t.usage.cpu_seconds for t in found], procs


def _cpu0_busy_idle() -> tuple[float, float]:
    """Core 0's busy and idle seconds so far, from /proc/stat's cpu0 line (USER_HZ ticks)."""
    line = next(l for l in Path("/proc/stat").read_text().splitlines() if l.startswith("cpu0 "))
    ticks = [int(v) for v in line.split()[1:9]]       # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


def _tick_slack(node: str, jobs_tasks: list[jobs_pb2.Task]) -> list[float]:
    """How far /proc's figure of each job may be from the cgroup's (ns or us): /proc/<pid>/stat
    rounds utime and stime down to a clock tick each, so a delta of two readings is off by
    under two ticks per process; one tick more of margin."""
    tick = 1 / os.sysconf("SC_CLK_TCK")
    return [(2 * len(task_pids(node, f"{t.id}.{t.attempt}")) + 1) * tick for t in jobs_tasks]


def test_figure3_cpu_time_follows_the_8_4_2_1_requests(figures: tuple[str, str]) -> None:
    weights = [8, 4, 2, 1]
    master, node = figures
    # taskset -c 0: every process of every job competes for the same core, saturated.
    multi = f"for i in 1 2 3 4; do sh -c '{SPIN}' & done; wait"
    commands = [multi, SPIN, SPIN, SPIN]
    jobs = [submit(master, "--cpu", str(0.2 * w), "--mem", "64Mi", "--", "taskset", "-c", "0", "sh", "-c", c)
            for w, c in zip(weights, commands)]
    channel = grpc.insecure_channel(master)
    stub = jobs_pb2_grpc.JobServiceStub(channel)
    try:
        deadline = time.monotonic() + 120
        while not all(t.state == common_pb2.TASK_RUNNING for t in _tasks(stub, jobs)):
            assert time.monotonic() < deadline, f"not all RUNNING after 120 s: {_tasks(stub, jobs)}"
            time.sleep(0.2)
        time.sleep(1.0)                                   # let the run queue settle
        # The window is the time the tasks are thawed: both sources are read while the
        # node is frozen, so they measure the very same window (a slow host only makes
        # the frozen pauses longer, which neither source counts).
        _freeze(node, True)
        agent1, procs1 = _frozen_snapshot(stub, node, jobs)
        thawed = _freeze(node, False)
        core_before = _cpu0_busy_idle()
        time.sleep(WINDOW_S)
        core_after = _cpu0_busy_idle()
        window_s = _freeze(node, True) - thawed
        agent2, procs2 = _frozen_snapshot(stub, node, jobs)
        slack = _tick_slack(node, _tasks(stub, jobs))
    finally:
        _freeze(node, False)
        channel.close()
        for j in jobs:
            tcl(master, "cancel", j, check=False)
    agent_used = [b - a for a, b in zip(agent1, agent2)]
    proc_used = [b - a for a, b in zip(procs1, procs2)]
    ratio = [u / agent_used[-1] for u in agent_used]
    print(f"\n[fig3] {MODE}: CPU time over {window_s:.1f}s (agent reports) "
          f"{' : '.join(f'{u:.2f}s' for u in agent_used)} -> ratio {' : '.join(f'{r:.2f}' for r in ratio)} "
          f"(want 8:4:2:1); /proc: {' : '.join(f'{u:.2f}s' for u in proc_used)}")
    total = sum(agent_used)
    busy, idle = (after - before for before, after in zip(core_before, core_after))
    print(f"[fig3] core 0 over the window: {busy:.2f}s busy, {idle:.2f}s idle; the four jobs used {total:.2f}s")
    # The jobs spin on core 0, so it never idles: their split of it is what is measured
    # (whatever else this host runs there takes its part of the core, not of the split).
    assert idle < 0.1 * (busy + idle) and total > 0, "the core was not saturated"
    for used, p_used, w, ticks in zip(agent_used, proc_used, weights, slack):
        # ±10%, but at least one point of the core: the 1-share job's 6.7% is within a
        # noisy scheduler's reach of ±0.67 points (CI's VM under TCG measured 5.97%);
        # an equal split (25% each) or a missing weight is still far outside.
        assert used / total == pytest.approx(w / 15, rel=0.10, abs=0.01), (agent_used, weights)
        # The agent's own figure against the kernel's per-process one over the same
        # frozen-to-frozen window: equal up to /proc's rounding (two ticks per process, +1)
        # and 1%. A figure of another task, a lost process or a wrong unit is far off.
        assert p_used == pytest.approx(used, rel=0.01, abs=ticks), (proc_used, agent_used, slack)
    for j in jobs:
        wait_state(master, j, DONE)
    _nothing_left(node)


HOG = ("import sys, time\nchunks = []\n"
       "for _ in range(int(sys.argv[1]) // 10):\n"
       "    chunks.append(b'x' * (10 << 20))\n    time.sleep(0.01)\n"
       "time.sleep(1)\nprint('allocated', len(chunks) * 10, 'MiB')\n")


def _has_swap() -> bool:
    return len(Path("/proc/swaps").read_text().splitlines()) > 1


def test_figure4_memory_limit_holds_with_and_without_swap(figures: tuple[str, str]) -> None:
    master, node = figures
    # (a) 500 MiB limit, swap unlimited, 700 MiB wanted: with a swap device the rest
    # goes to swap and the job succeeds; without one it is OOM-killed. Never > 500 MiB.
    a = submit(master, "--cpu", "1", "--mem", "500Mi", "--swap", "unlimited", "--",
               "python3", "-c", HOG, "700")
    # (b) 500 MiB + 200 MiB swap: 1000 MiB wanted is past memory+swap: OOM-killed.
    b = submit(master, "--cpu", "1", "--mem", "500Mi", "--swap", "200Mi", "--", "python3", "-c", HOG, "1000")
    ended_a, ended_b = wait_state(master, a, DONE, 240), wait_state(master, b, DONE, 240)
    human_b = tcl(master, "status", b).stdout
    for ended in (ended_a, ended_b):
        usage = ended["tasks"][0]["usage"]
        print(f"\n[fig4] {MODE} {ended['id']}: {ended['state']} {ended['tasks'][0]['reason']!r} "
              f"peak {usage['memory_peak_bytes'] / MI:.0f} MiB swap {usage['memory_swap_bytes'] / MI:.0f} MiB")
        # An OOM victim's in-flight allocation is force-charged past memory.max so that it
        # can exit (mm/memcontrol.c, try_charge's `force:` path): on cgroup v2 the peak can
        # show one charge batch, 64 pages, over the limit (seen: +4 KiB, +256 KiB). Allow a
        # huge page; more than that would be a limit that does not hold.
        assert 0 < usage["memory_peak_bytes"] <= 500 * MI + PEAK_SLACK, usage
    task_a, task_b = ended_a["tasks"][0], ended_b["tasks"][0]
    if _has_swap():
        assert ended_a["state"] == "SUCCEEDED", ended_a
    else:
        assert (ended_a["state"], task_a["reason"]) == ("FAILED", "OOMKilled"), ended_a
    assert (ended_b["state"], task_b["reason"], task_b["signal"]) == ("FAILED", "OOMKilled", 9), ended_b
    assert task_b["usage"]["oom_kills"] >= 1
    assert "OOMKilled" in human_b, human_b
    _nothing_left(node)


PEAK_SLACK = 2 * 1024 * 1024
BOMB = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")


def test_figure5_fork_bomb_stays_inside_pids_max(figures: tuple[str, str]) -> None:
    pids_max = 64
    master, node = figures
    bomb = submit(master, "--cpu", "0.5", "--mem", "200Mi", "--swap", "100Mi", "--pids-max", str(pids_max),
                  "--", "python3", "-c", BOMB)
    key = task_key(wait_state(master, bomb, {"RUNNING"}))
    seen, gaps, host_forks = [], [], 0
    # Heartbeats as the master sees them, polled over gRPC in-process: a `tcl` subprocess
    # per poll would measure its own start-up (seconds under software emulation).
    stub = jobs_pb2_grpc.ClusterServiceStub(grpc.insecure_channel(master))
    last_seen = stub.ListNodes(jobs_pb2.ListNodesRequest(), timeout=10).nodes[0].last_seen
    deadline = time.monotonic() + 6.0          # the bomb runs this long, then is cancelled
    poll_s = 0.0                               # the longest turn of this loop
    while time.monotonic() < deadline:
        turn = time.monotonic()
        seen.append(len(task_pids(node, key)))
        host_forks += subprocess.run(["true"], timeout=10).returncode == 0   # the host still forks
        now_seen = stub.ListNodes(jobs_pb2.ListNodesRequest(), timeout=10).nodes[0].last_seen
        if now_seen != last_seen:
            gaps.append(now_seen - last_seen)
            last_seen = now_seen
        time.sleep(0.05)
        poll_s = max(poll_s, time.monotonic() - turn)
    usage = job(master, bomb)["tasks"][0]["usage"]
    pids = task_pids(node, key)
    tcl(master, "cancel", bomb)
    ended = wait_state(master, bomb, DONE, 60)
    print(f"\n[fig5] {MODE}: bomb held at <= {max(seen)} processes (pids.max {pids_max}, refused forks "
          f"{usage['pids_max_hits']}), heartbeat gaps max {max(gaps, default=0):.2f}s (polled every "
          f"{poll_s:.2f}s at most), {host_forks} host forks ok; ended {ended['state']}")
    assert max(seen) <= pids_max and usage["pids"] <= pids_max and usage["pids_max_hits"] > 0
    # Heartbeats kept coming: at most 6 intervals apart. A gap is seen between two turns
    # of the loop above, so a slow turn (a fork under emulation on a loaded host) widens
    # what is seen by up to that turn's length; an agent stuck for the bomb's 6 s shows
    # no new heartbeat at all, or one gap of 6 s or more.
    assert host_forks > 0 and gaps and max(gaps) <= 6 * 0.5 + poll_s, (gaps, poll_s)
    assert ended["state"] == "CANCELLED" and ended["tasks"][0]["state"] == "KILLED"
    assert not any(alive(p) for p in pids)
    assert not any(d.exists() for d in group_dirs(node, key))
    _nothing_left(node)
