"""The usage ledger: rows made by the transitions (one per attempt end, however it ends),
the hourly roll-up math, retention pruning, reports that add whole hours and edges, and
the times `tcl report` takes."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timezone, timedelta

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.ledger import (
    DAY_S, HOUR_S, LEDGER_REASON_BYTES, LEDGER_ROW_BYTES, LedgerRow, Rollup, gap, roll_up, whole_hours, cut_reason,
    split_period,
)
from tcluster.domain.model import JobSpec, TaskState
from tcluster.domain.resources import Resources
from tcluster.domain.taskusage import TaskUsage
from tcluster.domain.when import parse_when
from tcluster.master.core.actions import TaskReport
from tcluster.master.core.events import Place, Preempt, Reports, Submit, Tick
from tcluster.master.usage.ledgerdb import LedgerFile, prune, write_rows
from tests.unit.test_master_transitions import J, T, World, running_world

NOW = 1_800_000_000.0


# ---- rows from the transitions ----

def test_an_attempt_that_ends_writes_one_row_with_its_usage() -> None:
    w = running_world()
    usage = TaskUsage(cpu_seconds=12.5, memory_peak_bytes=2**20)
    step = w.do(Reports("n1", (TaskReport(T, 1, TaskState.SUCCEEDED, exit_code=0, at=1005.0, usage=usage),), 2))
    assert len(step.ledger) == 1
    row = step.ledger[0]
    assert (row.job_id, row.index, row.attempt, row.node, row.state, row.exit_code) == (J, 0, 1, "n1", "SUCCEEDED", 0)
    assert row.cpu_seconds == 12.5 and row.memory_peak_bytes == 2**20 and row.job_end
    assert row.wall_seconds == pytest.approx(1004.0)     # RUNNING at=1.0 (the report's clock)


def test_a_retried_attempt_keeps_its_exit_code_and_the_next_attempt_its_own_start() -> None:
    w = running_world(retries=1)
    step = w.do(Reports("n1", (TaskReport(T, 1, TaskState.FAILED, exit_code=3, at=50.0),), 2))
    assert [(r.attempt, r.state, r.exit_code, r.job_end) for r in step.ledger] == [(1, "FAILED", 3, False)]
    assert w.task().state is TaskState.PENDING
    w.do(Place(((T, "n2"),)))
    w.do(Reports("n2", (TaskReport(T, 2, TaskState.RUNNING, at=60.0),), 1))
    step = w.do(Reports("n2", (TaskReport(T, 2, TaskState.SUCCEEDED, exit_code=0, at=70.0),), 2))
    assert [(r.attempt, r.node, r.state, r.wall_seconds, r.job_end) for r in step.ledger] == [
        (2, "n2", "SUCCEEDED", 10.0, True)]


def test_steps_without_an_attempt_end_write_no_row() -> None:
    w = running_world()
    assert not w.do(Reports("n1", (TaskReport(T, 1, TaskState.RUNNING, at=2.0),), 2)).ledger
    assert not w.do(Tick()).ledger


def test_a_lost_node_ends_the_attempt_as_lost() -> None:
    w = running_world()
    w.do(Tick(), at=11)          # silent past node_timeout_s: DOWN
    step = w.do(Tick(), at=100)  # and past lost_timeout_s: its tasks LOST
    assert [(r.state, r.node) for r in step.ledger] == [("LOST", "n1")]
    assert step.ledger[0].failed


def test_a_preempted_attempt_is_a_row_marked_preempted() -> None:
    w = running_world()
    w.do(Preempt(((T, 1, "preempted for queue b", "other"),)))
    step = w.do(Reports("n1", (TaskReport(T, 1, TaskState.KILLED, signal=15, at=30.0),), 2))
    assert [(r.state, r.attempt, r.job_end) for r in step.ledger] == [("PREEMPTED", 1, False)]


def test_the_owner_and_queue_come_from_the_spec() -> None:
    w = World()
    w.join("n1")
    w.do(Submit(J, JobSpec(("x",), Resources(2, 2**20), owner="alice", queue="default")))
    w.do(Place(((T, "n1"),)))
    step = w.do(Reports("n1", (TaskReport(T, 1, TaskState.FAILED, exit_code=1, at=9.0),), 1))
    assert (step.ledger[0].user, step.ledger[0].queue, step.ledger[0].cpu_request) == ("alice", "default", 2.0)


# ---- the values ----

def row(job: str = "j", index: int = 0, attempt: int = 1, user: str = "u", queue: str = "q", ended: float = NOW,
        cpu: float = 10.0, state: str = "SUCCEEDED", job_end: bool = True, wall: float = 100.0) -> LedgerRow:
    return LedgerRow(job, index, attempt, user, queue, "n", state, "", 0, ended - wall, ended, cpu, 1, 0.0, 1.0,
                     job_end)


def test_a_reason_is_cut_within_its_bound_never_inside_a_character() -> None:
    long = "é" * LEDGER_REASON_BYTES
    assert len(cut_reason(long).encode()) <= LEDGER_REASON_BYTES and cut_reason("short") == "short"
    assert LEDGER_ROW_BYTES < 1400           # documented in README, "Usage ledger"


rows_strategy = st.lists(st.builds(
    row, job=st.sampled_from("abc"), index=st.integers(0, 3), user=st.sampled_from(["u", "v"]),
    queue=st.sampled_from(["q", "r"]), ended=st.floats(NOW, NOW + 72 * HOUR_S), cpu=st.floats(0, 1e4),
    state=st.sampled_from(["SUCCEEDED", "FAILED", "LOST"]), job_end=st.booleans()), max_size=40)


@given(rows_strategy)
@settings(max_examples=60, deadline=None)
def test_roll_ups_sum_to_the_rows_and_split_by_hour(rows: list[LedgerRow]) -> None:
    sums = roll_up(rows)
    assert sum(r.attempts for r in sums.values()) == len(rows)
    assert sum(r.cpu_seconds for r in sums.values()) == pytest.approx(sum(r.cpu_seconds for r in rows))
    assert sum(r.failures for r in sums.values()) == sum(r.failed for r in rows)
    assert sum(r.jobs for r in sums.values()) == sum(r.job_end for r in rows)
    for (hour, user, queue), rollup in sums.items():
        assert rollup.attempts == sum(1 for r in rows if r.hour == hour and (r.user, r.queue) == (user, queue))


def test_the_gap_between_a_roll_up_and_the_detail_is_what_another_master_wrote() -> None:
    whole = Rollup(0, "u", "q", 100.0, 0.0, 50.0, 4, 1, 2)
    seen = Rollup(0, "u", "q", 60.0, 0.0, 30.0, 3, 1, 1)
    assert gap(whole, seen) == Rollup(0, "u", "q", 40.0, 0.0, 20.0, 1, 0, 1)
    assert gap(whole, whole) is None and gap(whole, None) == whole


@pytest.mark.parametrize("since, until, expect", [
    (0, 3 * HOUR_S, (0, 3 * HOUR_S)),
    (10, 3 * HOUR_S + 5, (HOUR_S, 3 * HOUR_S)),
    (10, 20, (HOUR_S, HOUR_S)),             # inside one hour: no whole hour
])
def test_whole_hours_of_a_period(since: float, until: float, expect: tuple[int, int]) -> None:
    assert whole_hours(since, until) == expect


@given(st.floats(0, 10 * DAY_S), st.floats(0, 10 * DAY_S))
@settings(max_examples=200, deadline=None)
def test_a_period_is_cut_into_whole_days_hours_and_edges_that_cover_it_once(since: float, length: float) -> None:
    until = since + length
    served, rest = split_period(since, until)
    pieces = sorted([*(s for spans in served for s in spans), *rest])
    assert sum(b - a for a, b in pieces) == pytest.approx(length, abs=1e-6)
    assert all(pieces[n][1] <= pieces[n + 1][0] for n in range(len(pieces) - 1))     # no overlap
    assert all(a % DAY_S == 0 and b % DAY_S == 0 for a, b in served[0])
    assert all(a % HOUR_S == 0 and b % HOUR_S == 0 for a, b in served[1])
    assert sum(b - a for a, b in rest) < 2 * HOUR_S       # the rows serve at most an hour at each end


# ---- the file: reports equal the rows' sums; retention ----

@given(rows_strategy, st.floats(NOW - HOUR_S, NOW + 73 * HOUR_S), st.floats(0, 100 * HOUR_S))
@settings(max_examples=40, deadline=None)
def test_a_report_from_hours_and_edges_equals_the_sum_of_its_rows(tmp_path_factory: pytest.TempPathFactory,
                                                                  rows: list[LedgerRow], since: float,
                                                                  length: float) -> None:
    ledger = LedgerFile(tmp_path_factory.mktemp("l") / "ledger.db")
    with ledger._db:
        ledger._db.execute("BEGIN")
        write_rows(ledger._db, rows)
    until = since + length
    for by, key in (("user", lambda r: r.user), ("queue", lambda r: r.queue), ("job", lambda r: r.job_id)):
        inside = [r for r in {(r.job_id, r.index, r.attempt): r for r in reversed(rows)}.values()
                  if since <= r.ended_at < until]
        lines = {line.key: line for line in ledger.report(since, until, by)}
        assert set(lines) == {key(r) for r in inside}
        for name, line in lines.items():
            mine = [r for r in inside if key(r) == name]
            assert line.attempts == len(mine) and line.failures == sum(r.failed for r in mine)
            assert line.cpu_hours == pytest.approx(sum(r.cpu_seconds for r in mine) / HOUR_S, abs=1e-9)
            assert line.jobs == sum(r.job_end for r in mine)
    ledger.close()


def test_a_row_written_twice_counts_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ledger = LedgerFile(tmp_path / "l.db")
    for _ in range(2):
        with ledger._db:
            ledger._db.execute("BEGIN")
            write_rows(ledger._db, [row(cpu=7200.0)])
    [line] = ledger.report(NOW - 3 * HOUR_S, NOW + 3 * HOUR_S, "user")
    assert (line.attempts, line.cpu_hours) == (1, 2.0)
    [hour] = ledger.hours()
    assert hour.attempts == 1


def test_retention_forgets_old_rows_and_hours(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ledger = LedgerFile(tmp_path / "l.db")
    with ledger._db:
        ledger._db.execute("BEGIN")
        write_rows(ledger._db, [row(job="old", ended=NOW - 5 * HOUR_S), row(job="new", ended=NOW)])
    assert ledger.prune(NOW - HOUR_S) == 1
    assert [r.job_id for r in ledger.history(0, NOW + 1)] == ["new"]
    assert [h.hour for h in ledger.hours()] == [int(NOW // HOUR_S) * HOUR_S]


def test_history_filters_by_user_and_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ledger = LedgerFile(tmp_path / "l.db")
    with ledger._db:
        ledger._db.execute("BEGIN")
        write_rows(ledger._db, [row(job="a", user="alice", state="FAILED"), row(job="b", user="bob"),
                                row(job="c", user="alice", ended=NOW - 10)])
    assert [r.job_id for r in ledger.history(0, NOW + 1, user="alice")] == ["a", "c"]
    assert [r.job_id for r in ledger.history(0, NOW + 1, states=["FAILED"])] == ["a"]


# ---- times ----

@pytest.mark.parametrize("text, expect", [
    ("now", NOW),
    ("now-7days", NOW - 7 * 86400),
    ("now-2hours", NOW - 7200),
    ("now-1week", NOW - 7 * 86400),
    ("now-90m", NOW - 5400),
    ("now+1day", NOW + 86400),
    ("2026-11-01", 1_793_491_200.0),
    ("2026-11-01T08:00", 1_793_491_200.0 + 8 * 3600),
    ("2026-11-01T08:00:30", 1_793_491_200.0 + 8 * 3600 + 30),
    ("1793491200", 1_793_491_200.0),
    ("today", 1_799_971_200.0),
    ("yesterday", 1_799_971_200.0 - 86400),
])
def test_times_in_slurms_forms(text: str, expect: float) -> None:
    assert parse_when(text, NOW, timezone.utc) == expect


def test_a_date_is_read_in_the_given_zone() -> None:
    assert parse_when("2026-11-01", NOW, timezone(timedelta(hours=2))) == 1_793_491_200.0 - 7200


@pytest.mark.parametrize("text", ["yesterday-ish", "2026-13-01", "now-7fortnights", "", "now-"])
def test_a_bad_time_names_the_field_and_the_forms(text: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        parse_when(text, NOW, timezone.utc, field="until")
    assert "until" in str(error.value) and "now-7days" in str(error.value)


def test_roll_ups_over_a_random_day_add_up() -> None:
    rnd = random.Random(7)
    rows = [row(job=str(n), ended=NOW + rnd.uniform(0, 86400), cpu=rnd.uniform(0, 100)) for n in range(500)]
    assert sum(r.cpu_seconds for r in roll_up(rows).values()) == pytest.approx(sum(r.cpu_seconds for r in rows))
    assert replace(rows[0], job_end=False).job_end is False


# ---- who sees what (master/ledger.py) ----

def _ledger(tmp_path):  # type: ignore[no-untyped-def]
    from tcluster.master.ledger import UsageLedger
    ledger = UsageLedger(tmp_path / "l.db", retention_s=3 * HOUR_S, clock=lambda: NOW + HOUR_S)
    with ledger.file._db:
        ledger.file._db.execute("BEGIN")
        write_rows(ledger.file._db, [row(job="a", user="alice", cpu=3600.0), row(job="b", user="bob", cpu=7200.0),
                                     row(job="old", user="bob", ended=NOW - 10 * HOUR_S)])
    return ledger


def test_a_user_sees_their_own_rows_and_an_admin_everyones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    from tcluster.domain.errors import PermissionDenied
    from tcluster.security.authz import Caller
    ledger = _ledger(tmp_path)
    alice, admin = Caller("alice", False, ""), Caller("root", True, "")
    mine = asyncio.run(ledger.report(alice, NOW - 2 * HOUR_S, 0, "user"))
    assert mine.own_only and [(x.key, x.cpu_hours) for x in mine.lines] == [("alice", 1.0)]
    every = asyncio.run(ledger.report(admin, NOW - 2 * HOUR_S, 0, "user"))
    assert not every.own_only and [x.key for x in every.lines] == ["alice", "bob"]
    assert [r.job_id for r in asyncio.run(ledger.history(alice, "", 0, 0, [], 0))] == ["a"]
    with pytest.raises(PermissionDenied, match="alice may not read the usage of bob"):
        asyncio.run(ledger.history(alice, "bob", 0, 0, [], 0))
    assert {r.job_id for r in asyncio.run(ledger.history(admin, "bob", 0, 0, [], 0))} == {"b", "old"}
    with pytest.raises(InvalidArgument, match="by"):
        asyncio.run(ledger.report(admin, 0, 0, "node"))
    with pytest.raises(InvalidArgument, match="state"):
        asyncio.run(ledger.history(admin, "", 0, 0, ["DONE"], 0))
    with pytest.raises(InvalidArgument, match="until"):
        asyncio.run(ledger.report(admin, NOW + 5 * HOUR_S, NOW, "user"))
    ledger.close()


def test_retention_follows_the_clock(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    from tcluster.security.authz import Caller
    ledger = _ledger(tmp_path)
    assert asyncio.run(ledger.prune()) == 1          # ended 11 h before the clock; 3 h are kept
    assert {r.job_id for r in asyncio.run(ledger.history(Caller("root", True, ""), "", 0, 0, [], 0))} == {"a", "b"}
    ledger.close()


def test_hours_copied_from_etcd_make_their_days_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A new leader's file gets etcd's hours without the rows: a report over whole days reads
    days summed from them."""
    ledger = LedgerFile(tmp_path / "l.db")
    day = int(NOW // DAY_S) * DAY_S
    ledger.set_hours([Rollup(day + 5 * HOUR_S, "u", "q", 3600.0, 0.0, 10.0, 2, 1, 1),
                      Rollup(day + 9 * HOUR_S, "u", "q", 7200.0, 0.0, 10.0, 1, 0, 1)])
    ledger.set_hours([Rollup(day + 9 * HOUR_S, "u", "q", 10800.0, 0.0, 10.0, 2, 0, 1)])    # a later total
    ledger.set_hours([Rollup(day + 9 * HOUR_S, "u", "q", 7200.0, 0.0, 10.0, 1, 0, 1)])     # an older copy, late
    [line] = ledger.report(day, day + DAY_S, "queue")
    assert (line.cpu_hours, line.attempts, line.failures, line.jobs) == (4.0, 4, 1, 2)
    [line] = ledger.report(day - DAY_S, day + 2 * DAY_S, "user")
    assert line.cpu_hours == 4.0


def test_retention_prunes_in_short_transactions_until_nothing_old_is_left(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tcluster.master.usage import ledgerdb
    ledger = LedgerFile(tmp_path / "l.db")
    with ledger._db:
        ledger._db.execute("BEGIN")
        write_rows(ledger._db, [row(job=f"j{n}", ended=NOW - 100 * HOUR_S + n * 10) for n in range(5000)])
    assert ledger.prune(NOW) == 5000 > ledgerdb.PRUNE_BATCH
    assert ledger.hours() == [] and ledger.history(0, NOW + 1) == []


# ---- etcd's hourly sums (master/store/etcdledger.py) ----

def test_etcd_roll_up_keys_add_each_steps_rows_to_what_etcd_holds() -> None:
    from tcluster.master.store.etcdledger import RollupWrites, decode, encode, expired, rollup_key
    hour = int(NOW // HOUR_S) * HOUR_S
    held = {rollup_key(hour, "a/b@c", "ads.prod"): encode(Rollup(hour, "a/b@c", "ads.prod", 100.0, 0.0, 5.0, 1, 0, 1))}
    writes = RollupWrites(held.get)
    first = writes.of([row(user="a/b@c", queue="ads.prod", cpu=10.0, ended=hour + 5)])
    second = writes.of([row(job="k", user="a/b@c", queue="ads.prod", cpu=1.0, ended=hour + 9, state="FAILED")])
    [(key, raw)] = second
    assert key == first[0][0] and decode(key, raw) == Rollup(hour, "a/b@c", "ads.prod", 111.0, 0.0, 205.0, 3, 1, 3)
    tables = [f"ledger/hours/{hour - 7200}", f"ledger/hours/{hour}"]
    items = {tables[0]: [(f"{tables[0]}/x@y", b"")], tables[1]: [(key, raw)]}
    assert expired(tables, items.__getitem__, hour) == [f"{tables[0]}/x@y"]


def test_a_closed_ledger_file_refuses_use_and_a_prune_racing_close_ends_cleanly(tmp_path: Path) -> None:
    """close() waits for the statement in flight and later use is refused (Unavailable), not
    run on a closed connection: a prune in its worker thread while the master stopped
    crashed the whole process (Fatal Python error: Segmentation fault, make test at 519aa79)."""
    import threading
    from tcluster.domain.errors import Unavailable
    from tcluster.master.usage.ledgerdb import LedgerFile
    ledger = LedgerFile(tmp_path / "ledger.db")
    pruned: list[int] = []
    racer = threading.Thread(target=lambda: pruned.extend(ledger.prune(1e12) for _ in range(200)))
    racer.start()
    ledger.close()
    racer.join(timeout=60)
    assert not racer.is_alive() and all(n == 0 for n in pruned)
    with pytest.raises(Unavailable, match="closed"):
        ledger.report(0.0, 1e12, "user")
    ledger.close()          # twice: nothing


def test_a_report_with_more_lines_than_a_reply_holds_is_refused_naming_the_way_out(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import tcluster.master.ledger as service_ledger
    from tcluster.security.authz import Caller
    ledger = _ledger(tmp_path)
    admin = Caller("root", True, "")
    monkeypatch.setattr(service_ledger, "REPORT_MAX_LINES", 2)
    assert len(asyncio.run(ledger.report(admin, NOW - 2 * HOUR_S, 0, "job")).lines) == 2
    with pytest.raises(InvalidArgument, match=r"holds 3 jobs, more than a report shows \(2\).*--by user\|queue"):
        asyncio.run(ledger.report(admin, NOW - 20 * HOUR_S, 0, "job"))
    ledger.close()
