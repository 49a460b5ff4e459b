"""Failover times of highly available masters (issue 12): a private 3-member etcd cluster
on loopback, N real `tcl-master`s with the same --store and --store-prefix, one real
agent; then K times: SIGKILL the leader and measure

  (a) leader key   from the kill until P/leader names another master (polled through
                   etcd's JSON gateway, every 20 ms);
  (b) submit ack   from the kill until `tcl --master a,b,c submit -- true`, started at the
                   kill and repeated until it succeeds, is acknowledged (includes the
                   CLI's process start, ~0.3 s here);

then restart the killed master as a standby and wait until it is back before the next
kill. Prints every kill and p50/p90/max of both, with the lease TTL used. Every process
it started is stopped by pid, the agent's cgroups are swept, the temp dir removed.

    .venv/bin/python bench/failover.py --kills 20 --lease-ttl-s 5
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from testkit.procs import BIN  # noqa: E402
from testkit.etcd_cluster import EtcdCluster, etcd_skip_reason  # noqa: E402
from testkit.faultcluster import skip_reason, wait_for, wait_value  # noqa: E402
from testkit.hacluster import HACluster  # noqa: E402

POLL_S = 0.02


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def leader_client(c: HACluster) -> str | None:
    """P/leader's client address (None: no key, or etcd did not answer)."""
    assert c.etcd is not None and c.etcd_cluster is not None
    got = c.etcd_cluster.get_fast(f"{c.etcd.prefix}/leader", timeout_s=0.5)
    if got is None or got[0] is None:
        return None
    try:
        return str(json.loads(got[0]).get("client"))
    except ValueError:
        return None


def submit_until_acked(c: HACluster, started: float, timeout_s: float, out: dict[str, float | str]) -> None:
    """`tcl submit` through the master list until one exits 0; records the seconds since
    `started` and the number of tries."""
    tries = 0
    while time.monotonic() - started < timeout_s:
        tries += 1
        result = subprocess.run([str(BIN / "tcl"), "--master", c.address, "submit", "--cpu", "0.1", "--mem", "16Mi",
                                 "--", "true"], capture_output=True, text=True, timeout=timeout_s)
        if result.returncode == 0:
            out["s"] = time.monotonic() - started
            out["tries"] = tries
            return
        out["last_error"] = result.stderr.strip()[-300:]
    out["tries"] = tries


def one_kill(c: HACluster, k: int, timeout_s: float) -> tuple[float, float]:
    old = c.wait_leader(timeout_s=timeout_s)
    old_address = c.masters[old].address
    assert leader_client(c) == old_address, f"P/leader {leader_client(c)} is not the serving master {old_address}"
    ack: dict[str, float | str] = {}
    started = time.monotonic()
    c.kill_one(old, signal.SIGKILL)
    submitter = threading.Thread(target=submit_until_acked, args=(c, started, timeout_s, ack), daemon=True)
    submitter.start()
    new_client = wait_value(lambda: leader_client(c), lambda a: a not in (None, old_address),
                            timeout_s, "P/leader names another master", POLL_S)
    key_s = time.monotonic() - started
    submitter.join(timeout_s + 30)
    if "s" not in ack:
        raise AssertionError(f"kill {k}: no submit acknowledged within {timeout_s}s: {ack.get('last_error')}")
    ack_s = float(ack["s"])
    new = next(m.index for m in c.masters if m.address == new_client)
    print(f"kill {k:3d}: master {old} -> {new}   leader key {key_s:6.2f} s   submit ack {ack_s:6.2f} s"
          f"   ({ack['tries']} tcl submit runs)", flush=True)
    c.start_one(old)                    # back as a standby
    wait_for(lambda: c.leading() == [new], timeout_s, f"master {new} alone leads, {old} back as a standby")
    return key_s, ack_s


def summary(name: str, values: list[float]) -> str:
    return (f"{name:12s} p50 {percentile(values, 50):6.2f} s   p90 {percentile(values, 90):6.2f} s   "
            f"max {max(values):6.2f} s   mean {statistics.mean(values):6.2f} s   (n={len(values)})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--masters", type=int, default=3)
    p.add_argument("--lease-ttl-s", type=int, default=5)
    p.add_argument("--timeout-s", type=float, default=60.0, help="bound on every wait")
    p.add_argument("--no-agent", action="store_true", help="no agent (submits are acknowledged without one)")
    args = parse_quick(p, {"kills": 1, "masters": 2, "lease_ttl_s": 2, "no_agent": True})
    reason = etcd_skip_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    agent = not args.no_agent and skip_reason() is None
    if not args.no_agent and not agent:
        print(f"no agent: {skip_reason()}", file=sys.stderr)
    keys: list[float] = []
    acks: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tcl-failover-") as tmp:
        etcd = EtcdCluster(Path(tmp), members=3)
        c: HACluster | None = None
        try:
            c = HACluster(Path(tmp), etcd_cluster=etcd, n_masters=args.masters, lease_ttl_s=args.lease_ttl_s,
                          node_timeout_s=30.0, lost_timeout_s=60.0)
            c.start_masters(timeout_s=args.timeout_s)
            if agent:
                c.start_agent("bench-failover", cpus="2")
            print(f"etcd {etcd.url}, prefix {c.etcd.prefix if c.etcd else ''}; {args.masters} masters "
                  f"{c.address}; lease TTL {args.lease_ttl_s} s; agent: {'yes' if agent else 'no'}", flush=True)
            for k in range(1, args.kills + 1):
                key_s, ack_s = one_kill(c, k, args.timeout_s)
                keys.append(key_s)
                acks.append(ack_s)
        except BaseException:
            if c is not None:
                print(c.log_tail(1500), file=sys.stderr)
            raise
        finally:
            left = c.close() if c is not None else []
            etcd.close()
            if left:
                print(f"swept cgroups the agent left: {left}", file=sys.stderr)
    if keys:
        print(f"\nfailover over {len(keys)} SIGKILLs of the leader, lease TTL {args.lease_ttl_s} s, "
              f"{args.masters} masters, 3 etcd members:")
        print(summary("leader key", keys))
        print(summary("submit ack", acks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
