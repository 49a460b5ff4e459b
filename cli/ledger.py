"""`tcl report` and `tcl history`: the usage ledger's sums and rows (README, "Usage ledger")."""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from datetime import timedelta, timezone
from typing import Any, Sequence

from tcluster.cli.client import MasterClient
from tcluster.cli.commands import print_json
from tcluster.domain.units import format_bytes, format_duration
from tcluster.domain.when import parse_when
from tcluster.v1 import jobs_pb2
from tcluster.views.formats import format_table, timestamp

EXIT_OK = 0
REPORT_COLUMNS = ("cpu_hours", "gpu_hours", "jobs", "attempts", "failures", "wall_hours")
HISTORY_COLUMNS = ("task", "attempt", "user", "queue", "node", "state", "exit", "start", "end", "elapsed",
                   "cpu_seconds", "memory_peak", "gpu_seconds", "reason")


def _period(args: argparse.Namespace) -> tuple[float, float]:
    now = time.time()
    tz = timezone(timedelta(seconds=time.localtime(now).tm_gmtoff))     # times as the user reads clocks
    return parse_when(args.since, now, tz, "since"), parse_when(args.until, now, tz, "until")


def report(args: argparse.Namespace, client: MasterClient) -> int:
    since, until = _period(args)
    reply = client.report(jobs_pb2.ReportRequest(since=since, until=until, by=args.by))
    records = [{args.by: line.key, "cpu_hours": line.cpu_hours, "gpu_hours": line.gpu_hours, "jobs": line.jobs,
                "attempts": line.attempts, "failures": line.failures, "wall_hours": line.wall_hours}
               for line in reply.lines]
    if args.output == "json":
        print_json({"since": reply.since, "until": reply.until, "by": reply.by, "own_only": reply.own_only,
                    "lines": records})
    elif args.output == "csv":
        _csv([args.by, *REPORT_COLUMNS], [[r[args.by], *(r[c] for c in REPORT_COLUMNS)] for r in records])
    else:
        print(f"usage from {timestamp(reply.since)} to {timestamp(reply.until)}"
              + (" (your own)" if reply.own_only else ""))
        rows: list[list[str]] = [[str(r[args.by]), f"{r['cpu_hours']:.2f}", f"{r['gpu_hours']:.2f}", str(r["jobs"]), str(r["attempts"]),
                 str(r["failures"]), f"{r['wall_hours']:.2f}"] for r in records]
        print(format_table([args.by.upper(), "CPU-H", "GPU-H", "JOBS", "ATTEMPTS", "FAILURES", "WALL-H"], rows))
    return EXIT_OK


def history(args: argparse.Namespace, client: MasterClient) -> int:
    since, until = _period(args)
    reply = client.history(jobs_pb2.HistoryRequest(user=args.user, since=since, until=until,
                                                   states=args.state or [], limit=max(0, args.limit)))
    records = [_history_record(r) for r in reply.rows]
    if args.output == "json":
        print_json(records)
    elif args.output == "csv":
        _csv(list(HISTORY_COLUMNS), [[r[c] if r[c] is not None else "" for c in HISTORY_COLUMNS] for r in records])
    else:
        rows: list[list[str]] = [[r["task"], str(r["attempt"]), r["user"], r["queue"], r["node"], r["state"],
                 "" if r["exit"] is None else str(r["exit"]), r["start"] or "", r["end"] or "",
                 format_duration(r["elapsed"]), f"{r['cpu_seconds']:.1f}", format_bytes(r["memory_peak"]),
                 f"{r['gpu_seconds']:.0f}", r["reason"][:40]] for r in records]
        print(format_table(["TASK", "ATT", "USER", "QUEUE", "NODE", "STATE", "EXIT", "START", "END", "ELAPSED",
                            "CPU-S", "MAXMEM", "GPU-S", "REASON"], rows))
    return EXIT_OK


def _history_record(r: jobs_pb2.LedgerRow) -> dict[str, Any]:
    return {"task": f"{r.job_id}.{r.index}", "job_id": r.job_id, "index": r.index, "attempt": r.attempt,
            "user": r.user, "queue": r.queue, "node": r.node, "state": r.state,
            "exit": r.exit_code if r.has_exit_code else None, "start": timestamp(r.started_at),
            "end": timestamp(r.ended_at), "elapsed": max(0.0, r.ended_at - r.started_at) if r.started_at else 0.0,
            "cpu_seconds": r.cpu_seconds, "memory_peak": r.memory_peak_bytes, "gpu_seconds": r.gpu_seconds,
            "reason": r.reason}


def _csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    sys.stdout.write(out.getvalue())
