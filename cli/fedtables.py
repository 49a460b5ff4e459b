"""Federated jobs and the federation's status for `tcl --federation`: human tables and the
JSON documents scripts read (their field names are an interface). Pure: `now` is passed in."""

from __future__ import annotations

from typing import Any, Sequence

from tcluster.cli.tables import EMPTY, age_cell, format_age
from tcluster.views.formats import format_table, timestamp
from tcluster.domain.units import format_bytes, format_cpu
from tcluster.v1 import federation_pb2 as fpb

JsonDict = dict[str, Any]
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")
MIB = 1 << 20


def task_json(t: fpb.FedTaskStatus) -> JsonDict:
    return {"index": t.index, "state": t.state, "lm": t.lm or None, "node": t.node or None,
            "lm_job": t.job_id or None, "attempts": t.attempts, "exit_code": t.exit_code, "reason": t.reason,
            "preemptions": t.preemptions}


def job_json(job: fpb.FedJob) -> JsonDict:
    return {"id": job.id, "name": job.name, "queue": job.queue, "gm": job.gm, "state": job.state,
            "submitted_at": job.submitted_at, "tasks": [task_json(t) for t in job.tasks]}


def tasks_cell(job: fpb.FedJob) -> str:
    done = sum(t.state in TERMINAL for t in job.tasks)
    return f"{done}/{len(job.tasks)} done"


def jobs_table(jobs: Sequence[fpb.FedJob], now: float) -> str:
    rows = [(j.id, j.name or EMPTY, j.queue, j.gm, j.state, tasks_cell(j), age_cell(j.submitted_at, now))
            for j in jobs]
    return format_table(("ID", "NAME", "QUEUE", "GM", "STATE", "TASKS", "SUBMITTED"), rows)


def job_view(job: fpb.FedJob, now: float) -> str:
    head = [f"job {job.id}" + (f" ({job.name})" if job.name else "") + f": {job.state}",
            f"queue {job.queue}, owned by GM {job.gm}, submitted {timestamp(job.submitted_at)} "
            f"({format_age(now - job.submitted_at)} ago)"]
    rows = [(str(t.index), t.state, t.lm or EMPTY, t.node or EMPTY, t.job_id or EMPTY, str(t.attempts),
             str(t.exit_code) if t.state in TERMINAL else EMPTY, t.reason or EMPTY) for t in job.tasks]
    table = format_table(("TASK", "STATE", "LM", "NODE", "LM JOB", "ATTEMPTS", "EXIT", "REASON"), rows)
    return "\n".join(head) + "\n\n" + table


def free_of(res: fpb.Res) -> tuple[float, int]:
    """(cores, bytes) of a [millicores, MiB] vector."""
    v = list(res.v) + [0, 0]
    return v[0] / 1000, v[1] * MIB


def lm_json(gm: str, lm: fpb.LMInfo) -> JsonDict:
    cpu, mem = free_of(lm.free)
    return {"seen_by": gm, "name": lm.name, "index": lm.index, "address": lm.address, "epoch": lm.epoch,
            "nodes": lm.nodes, "partition_nodes": list(lm.partition_nodes),
            "view_age_s": lm.view_age_s if lm.view_age_s >= 0 else None, "connected": lm.connected,
            "free": {"cpu": cpu, "memory": mem}}


def gm_json(g: fpb.GMInfo) -> JsonDict:
    return {"name": g.name, "index": g.index, "address": g.address, "alive": g.alive, "queues": list(g.queues),
            "pending": g.pending, "launches": g.launches, "repartitions": g.repartitions,
            "inconsistencies": g.inconsistencies, "preemptions": g.preemptions, "taken_over": list(g.taken_over)}


def status_json(answers: Sequence[tuple[str, fpb.FedStatus | None]]) -> JsonDict:
    """answers: (address asked, its Status or None when it did not answer)."""
    gms, lms, membership, members = [], [], None, None
    for address, st in answers:
        if st is None:
            gms.append({"name": None, "address": address, "alive": False})
            continue
        gms.extend(gm_json(g) for g in st.gms)
        lms.extend(lm_json(st.gm, lm) for lm in st.lms)
        membership = membership or st.membership or None
        if members is None and st.members:      # etcd's view: the same from every GM that reads it
            members = [{"name": m.name, "index": m.index, "address": m.address, "alive": m.alive,
                        "queues": list(m.queues), "taken_over": list(m.taken_over)} for m in st.members]
    return {"gms": gms, "lms": lms, "membership": membership, "members": members or []}


def status_tables(doc: JsonDict) -> str:
    def cell(g: JsonDict, key: str) -> str:
        return str(g[key]) if key in g else EMPTY
    gms = [(g["name"] or EMPTY, g["address"], "yes" if g["alive"] else "NO",
            ",".join(g.get("queues", ())) or EMPTY, cell(g, "pending"), cell(g, "launches"),
            cell(g, "repartitions"), cell(g, "inconsistencies"), cell(g, "preemptions")) for g in doc["gms"]]
    lms = [(lm["seen_by"], lm["name"], lm["address"], str(lm["epoch"]), str(lm["nodes"]),
            "/".join(str(n) for n in lm["partition_nodes"]) or EMPTY,
            f"{lm['view_age_s']:.1f}s" if lm["view_age_s"] is not None else EMPTY,
            "yes" if lm["connected"] else "NO", format_cpu(lm["free"]["cpu"]), format_bytes(lm["free"]["memory"]))
           for lm in doc["lms"]]
    text = (format_table(("GM", "ADDRESS", "ALIVE", "QUEUES", "PENDING", "LAUNCHES", "REPARTITIONS",
                          "INCONSISTENCIES", "PREEMPTIONS"), gms) + "\n\n" +
            format_table(("SEEN BY", "LM", "ADDRESS", "EPOCH", "NODES", "PER GM", "VIEW AGE", "CONNECTED",
                          "FREE CPU", "FREE MEM"), lms))
    if doc.get("members"):      # --etcd: every GM etcd knows of, dead ones and takeovers included
        rows = [(m["name"], str(m["index"]), m["address"] or EMPTY, "yes" if m["alive"] else "NO",
                 ",".join(m["queues"]) or EMPTY, ",".join(m["taken_over"]) or EMPTY) for m in doc["members"]]
        text += (f"\n\nmembership: {doc['membership']}\n" +
                 format_table(("MEMBER", "INDEX", "ADDRESS", "ALIVE", "SERVES", "TAKEN OVER"), rows))
    return text
