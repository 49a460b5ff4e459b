"""A real `tcl-master` process for the harness: started (plain, or through
`testkit.loadgen.probe` for round and step timings), watched through /proc, profiled
with py-spy, stopped by its pid."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from testkit.loadgen.procstat import cpu_seconds, rss_bytes, thread_cpu_seconds

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]   # testkit/ is not installed: the probe is run from the checkout


class MasterProc:
    def __init__(self, data_dir: Path, log: Path, *, fairness: str, placement: str, heartbeat_s: float = 1.0,
                 probe: bool = True, extra: list[str] | None = None, log_level: str = "WARNING",
                 store: str = "", store_prefix: str = "", max_txn_ops: int = 0) -> None:
        self.data_dir, self.log_path = data_dir, log
        self.stats_path = str(log.with_suffix(".stats.json"))
        self.store = store
        args = ["--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--fairness", fairness,
                "--placement", placement, "--heartbeat-interval-s", str(heartbeat_s), "--log-level", log_level,
                *(["--store", store] if store else []), *(["--store-prefix", store_prefix] if store_prefix else []),
                *(["--store-max-txn-ops", str(max_txn_ops)] if max_txn_ops else []), *(extra or [])]
        if probe:
            cmd = [sys.executable, "-m", "testkit.loadgen.probe", "--stats", self.stats_path,
                   "--cprofile", str(log.with_suffix(".cprofile")), "--", *args]
        else:
            cmd = [str(BIN / "tcl-master"), *args]
        self.probe = probe
        self._log = open(log, "wb")
        self.started = time.monotonic()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.popen = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.port = 0
        self._stats_seq = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_listening(self, timeout_s: float = 600.0) -> float:
        """Seconds from start until it listens (loading its state is part of that) and,
        on etcd, leads (until then it answers every call UNAVAILABLE, as a standby)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if match and (not self.store.startswith("etcd") or "tcl-master leading" in text):
                self.port = int(match.group(1))
                return time.monotonic() - self.started
            if self.popen.poll() is not None:
                raise RuntimeError(f"tcl-master exited {self.popen.returncode}:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"tcl-master not listening within {timeout_s}s")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def leadership_lost(self) -> list[str]:
        """etcd: the lines where this master lost its leadership (and re-executed)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if "leadership lost (" in line]

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def thread_cpu(self) -> dict[str, float]:
        return thread_cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def timings(self, timeout_s: float = 10.0) -> dict[str, object] | None:
        """What the probe timed since the last call (None for a plain master)."""
        if not self.probe:
            return None
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                data = json.loads(Path(self.stats_path).read_text())
                if data["seq"] > self._stats_seq:
                    self._stats_seq = data["seq"]
                    return data
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        return None

    def pyspy(self, seconds: float, out: Path, rate: int = 100) -> subprocess.Popen[bytes] | None:
        """py-spy record (collapsed stacks, GIL-holding and idle samples apart) in the
        background; None if py-spy is not installed."""
        exe = shutil.which("py-spy") or str(BIN / "py-spy")
        if not os.path.exists(exe):
            return None
        return subprocess.Popen([exe, "record", "--pid", str(self.pid), "--duration", str(int(seconds)),
                                 "--rate", str(rate), "--format", "raw", "--output", str(out), "--nonblocking"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._log.close()
        return self.popen.returncode


def _stacks(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output as (frames from the root, samples); [] if it was not written."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    stacks = []
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if count_text.isdigit():
            stacks.append(([f for f in stack.split(";") if f], int(count_text)))
    return stacks


def collapsed_top(path: Path, limit: int = 25) -> tuple[int, list[tuple[str, int, int]]]:
    """Total samples, and per function (self samples, inclusive samples), by inclusive."""
    stacks = _stacks(path)
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    for frames, count in stacks:
        short = [_short(f) for f in frames]
        if short:
            own[short[-1]] = own.get(short[-1], 0) + count
        for frame in set(short):
            incl[frame] = incl.get(frame, 0) + count
    ranked = sorted(incl, key=lambda f: -incl[f])[:limit]
    return sum(count for _, count in stacks), [(f, own.get(f, 0), incl[f]) for f in ranked]


def collapsed_self(path: Path, limit: int = 25) -> tuple[int, list[tuple[str, int]]]:
    total, _ = collapsed_top(path, 0)
    own: dict[str, int] = {}
    for frames, count in _stacks(path):
        if frames:
            leaf = _short(frames[-1])
            own[leaf] = own.get(leaf, 0) + count
    return total, sorted(own.items(), key=lambda kv: -kv[1])[:limit]


def _short(frame: str) -> str:
    """`func (path/to/tcluster/master/state.py:123)` -> `func (master/core/state.py)`."""
    match = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not match:
        return frame
    func, path = match.groups()
    parts = Path(path).parts
    tail = "/".join(parts[-2:]) if len(parts) >= 2 else path
    return f"{func} ({tail})"


# Where a py-spy stack's time goes, by the first of these met from the leaf up.
CATEGORIES = [
    ("etcd store: commit (records, txn ops, mirror apply)", r"master/store/etcd\.py"),
    ("etcd mirror: watch events, listeners", r"tcluster/etcd/mirror\.py"),
    ("etcd client calls (etcdkv: txn, watch, keepalive)", r"tcluster/etcd/kv\.py"),
    ("etcd leadership (lease, fence)", r"master/store/leadership\.py"),
    ("SQLite write (Store.apply: the fsync'd transaction)", r"Store\.apply|Store\._write"),
    ("scheduling round (schedule_round)", r"schedule_round \(scheduler"),
    ("rest of schedule_once (Place step)", r"Rounds\.schedule_once"),
    ("pb -> domain (inbound_from_pb, usage/resources_from_pb)",
     r"inbound_from_pb|usage_from_pb|resources_from_pb|report_from_pb"),
    ("domain -> pb (outbound_to_pb, job_to_pb)", r"outbound_to_pb|job_to_pb|spec_to_pb"),
    ("transitions.handle (Draft, _beat, _reports, ...)", r"handle \(master/core/transitions"),
    ("MasterState.apply", r"MasterState\.apply"),
    ("Agents.send (links, queues)", r"Agents\.send"),
    ("Tick", r"Rounds\.tick"),
    ("rest of the service and _do", r"MasterService\.|Agents\.|Rounds\.|AgentServicer\._handle"),
    ("gRPC aio: agent stream read loop (cython)", r"AgentServicer\._read"),
    ("gRPC aio: agent stream write loop (Connect)", r"AgentServicer\.Connect"),
    ("gRPC unary handlers (Submit/Get/Cancel/List)", r"JobServicer\.|ClusterServicer\."),
    ("gRPC poller thread (native)", r"^Thread\.run"),
    ("loop idle (epoll)", r"EpollSelector\.select"),
    ("asyncio / gRPC cython callbacks (Handle._run)", r"Handle\._run|_run_once"),
]


def categorize(path: Path) -> tuple[int, list[tuple[str, int]]]:
    counts: dict[str, int] = {}
    stacks = _stacks(path)
    for frames, count in stacks:
        name = next((hit for frame in reversed(frames)
                     for hit, pattern in CATEGORIES if re.search(pattern, frame)), "other")
        counts[name] = counts.get(name, 0) + count
    return sum(count for _, count in stacks), sorted(counts.items(), key=lambda kv: -kv[1])
