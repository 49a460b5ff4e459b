"""`tcl report` over a large usage ledger (issue 33: 10 million rows, <= 1 s).

Fills a master's state database with N ledger rows (default 10,000,000: 400 days, 200 users
in 20 queues, each finished attempt ~100 s to ~1 h long) and the hourly and daily sums the
store keeps beside them (built here in bulk by SQL with the same grouping write_rows uses;
the sums are checked against a brute-force SUM over the rows below), then times:
- the report as the master computes it (master/usage/ledgerdb.LedgerFile.report), by user and
  by queue over the whole period with edges off the hour, and over 30 days;
- `tcl report --by user` end to end: a tcl-master started on that database, the CLI's
  process included (its start is most of it).

    python bench/ledger_report.py             # 10 M rows; ~15 minutes to fill on 2 busy cores
    python bench/ledger_report.py --keep /var/tmp/ledger10m   # fill once, time again later
    python bench/ledger_report.py --quick     # toy size"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.quick import parse_args  # noqa: E402
from tcluster.domain.ledger import DAY_S, HOUR_S  # noqa: E402
from tcluster.master.usage.ledgerdb import SCHEMA, TIERS, LedgerFile  # noqa: E402

def fill(path: Path, rows: int, days: int, users: int, queues: int) -> tuple[float, float]:
    """The rows, ending over the `days` before now, and their sums: (first end, last end)."""
    span = days * DAY_S
    t0 = time.time() - span - HOUR_S
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    tables = [s for s in SCHEMA.split(";") if "CREATE TABLE" in s]
    indexes = [s for s in SCHEMA.split(";") if "CREATE INDEX" in s]
    for statement in tables:
        db.execute(statement)
    db.execute("BEGIN")
    db.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "INSERT INTO ledger SELECT printf('j%08x', i / 4), i % 4, 1, 'u' || ((i * 7919) % ?), "
        "'q' || (((i * 7919) % ?) % ?), 'n' || (i % 500), CASE WHEN i % 50 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, "
        "'', CASE WHEN i % 50 = 0 THEN 1 ELSE 0 END, ? + i * ? - 100 - (i % 3500), ? + i * ?, "
        "(i % 1000) / 10.0, 2097152 * (1 + i % 64), CASE WHEN i % 10 = 0 THEN 600.0 ELSE 0.0 END, 1.0, "
        "i % 4 = 3 FROM n",
        (rows - 1, users, users, queues, t0, span / rows, t0, span / rows))
    for unit, table in TIERS:
        db.execute(f"INSERT INTO {table} SELECT CAST(ended_at / {unit} AS INTEGER) * {unit}, user, queue, SUM(cpu_s), "
                   "SUM(gpu_s), SUM(MAX(0, ended_at - started_at)), COUNT(*), SUM(state IN ('FAILED', 'LOST')), "
                   "SUM(job_end) FROM ledger GROUP BY 1, 2, 3")
    db.execute("COMMIT")
    for statement in indexes:
        db.execute(statement)
    return bounds(db)


def bounds(db: sqlite3.Connection) -> tuple[float, float]:
    first, last = db.execute("SELECT MIN(ended_at), MAX(ended_at) FROM ledger").fetchone()
    db.close()
    return float(first), float(last)


def brute(path: Path, since: float, until: float, column: str) -> dict[str, tuple[float, int]]:
    db = sqlite3.connect(path)
    out = {k: (cpu, n) for k, cpu, n in db.execute(
        f"SELECT {column}, SUM(cpu_s), COUNT(*) FROM ledger WHERE ended_at >= ? AND ended_at < ? GROUP BY 1",
        (since, until))}
    db.close()
    return out


def timed(ledger: LedgerFile, since: float, until: float, by: str, repeat: int) -> tuple[float, int]:
    best, lines = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        found = ledger.report(since, until, by)
        best = min(best, time.perf_counter() - start)
        lines = len(found)
    return best, lines


def check(ledger: LedgerFile, path: Path, since: float, until: float, by: str) -> None:
    """The report equals a SUM over the rows (the sums were built right)."""
    want = brute(path, since, until, by)
    got = {line.key: (line.cpu_hours * HOUR_S, line.attempts) for line in ledger.report(since, until, by)}
    assert set(got) == set(want), (sorted(got)[:5], sorted(want)[:5])
    for key, (cpu, n) in want.items():
        assert got[key][1] == n and abs(got[key][0] - cpu) <= 1e-6 * max(1.0, cpu), (key, got[key], cpu, n)


def through_tcl(data: Path, since: float, until: float, days: int) -> tuple[float, float]:
    """`tcl report --by user` against a tcl-master serving `data`, and `tcl whoami` (the CLI's
    own start and one call: the baseline): each one's best wall time of three."""
    bin_dir = Path(sys.executable).parent
    master = subprocess.Popen([str(bin_dir / "tcl-master"), "--listen", "127.0.0.1:0", "--http", "off",
                               "--ledger-retention", f"{days + 2}d", "--data-dir", str(data)],
                              stderr=subprocess.PIPE, text=True)
    try:
        address = ""
        assert master.stderr is not None
        for line in master.stderr:
            if "listening on" in line:
                address = line.split("listening on ")[1].split(";")[0].split(" ")[0]
                break
        def best(*args: str) -> float:
            times = []
            for _ in range(3):
                start = time.perf_counter()
                out = subprocess.run([str(bin_dir / "tcl"), "--master", address, *args], capture_output=True,
                                     text=True, timeout=120)
                times.append(time.perf_counter() - start)
                assert out.returncode == 0, out.stderr
            return min(times)
        return best("report", "--since", f"{since:.1f}", "--until", f"{until:.1f}", "--by", "user"), best("whoami")
    finally:
        master.terminate()
        master.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=400)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="fill DIR/master/master.db once and reuse it on later runs (default: a temporary dir)")
    args = parse_args(parser, {"rows": 20_000, "days": 10, "users": 20, "queues": 4, "repeat": 1})
    with tempfile.TemporaryDirectory(prefix="tcl-bench-ledger-", dir="/var/tmp") as tmp:
        run(args, (args.keep or Path(tmp)) / "master")


def run(args: argparse.Namespace, data: Path) -> None:
    path = data / "master.db"
    if path.exists():
        first, last = bounds(sqlite3.connect(path))
        rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
        print(f"reusing {rows:,} ledger rows in {path}; file {path.stat().st_size / 2**20:,.0f} MiB")
    else:
        data.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        first, last = fill(path, args.rows, args.days, args.users, args.queues)
        rows = args.rows
        print(f"filled {rows:,} ledger rows ({args.days} days, {args.users} users, {args.queues} queues) in "
              f"{time.perf_counter() - start:.1f} s; file {path.stat().st_size / 2**20:,.0f} MiB "
              f"({path.stat().st_size / rows:.0f} bytes a row with its indexes and sums)")
    ledger = LedgerFile(path)
    whole = (first - 1234.5, last + 1)
    month = (last - 30 * DAY_S + 777.0, last + 1)
    check(ledger, path, *whole, "user")
    check(ledger, path, *month, "queue")
    print(f"{'report':<34} {'rows in period':>15} {'lines':>6} {'best of ' + str(args.repeat):>10}")
    for name, (since, until), by in (("by user, the whole period", whole, "user"),
                                     ("by queue, the whole period", whole, "queue"),
                                     ("by user, the last 30 days", month, "user")):
        seconds, lines = timed(ledger, since, until, by, args.repeat)
        inside = sum(n for _, n in brute(path, since, until, "queue").values())
        print(f"{name:<34} {inside:>15,} {lines:>6} {seconds:>9.3f}s")
    ledger.close()
    took, baseline = through_tcl(data, *whole, args.days)
    print(f"tcl report --by user over {rows:,} rows, end to end: {took:.2f} s; tcl whoami (the CLI's start "
          f"and one call) {baseline:.2f} s; the report's own share {took - baseline:.2f} s "
          f"(goal <= 1 s: {'met' if took - baseline <= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
