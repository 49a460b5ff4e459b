"""tcl-gm --preemption's settings and how the GM daemon takes a preempted task's end
(issue 25, Alg. 2): back to PENDING with why, counted, at its queue's head, once; an
earlier copy's end (another LM job than the one running) never requeues it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.daemonkit.configfile import ConfigError
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import parse, settings_from
from tcluster.gm.store import GMStore
from tcluster.v1 import common_pb2, federation_pb2 as fpb, jobs_pb2

BASE = dict(name="gm0", index=0, lms="lm0=h:1", gms="gm0=h:5", queue_map="a=gm0,b=gm0,c=gm0")
WHY = "preempted by f0-2.0 of queue b"


def test_preemption_is_off_by_default_and_shares_default_to_equal() -> None:
    s = settings_from(BASE)
    assert not s.preemption and s.queue_shares() == {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    s = parse(["--lms", "lm0=h:1", "--preemption", "--shares", "a=0.25,b=0.75"])
    assert s.preemption and s.queue_shares() == {"a": 0.25, "b": 0.75}


@pytest.mark.parametrize("shares, words", [
    ("a=0.6,b=0.6", "add up to 1.2"),
    ("a=0", r"not in \(0, 1\]"),
    ("a=half", "'half' is not a number"),
    ("a", "NAME=VALUE"),
])
def test_bad_shares_name_the_field(shares: str, words: str) -> None:
    with pytest.raises(ConfigError, match=f"--shares.*{words}"):
        settings_from({**BASE, "shares": shares})


def _daemon(tmp_path: Path) -> tuple[GMDaemon, str]:
    d = GMDaemon(settings_from({**BASE, "state_dir": str(tmp_path), "preemption": True}))
    d._store = GMStore(str(tmp_path))
    spec = jobs_pb2.JobSpec(queue="a", tasks=1, command=["sleep"], resources=common_pb2.Resources(cpu=1, memory=2**28))
    d.store.add_job(0, "a", "j", spec.SerializeToString(), 1, "")
    d.enqueue(d.store.tasks()[0])
    d.gm.decide()                                        # no LM view: no room, parked
    row = d.store.tasks()[0]
    p = d.gm.queues["a"].items.popleft()
    d.store.placing(row.task_id, 0, 0, 0, b"req")
    d.store.placed(row.task_id, 0, 0, "J1")
    d.gm.running[row.task_id] = (0, 0, p)
    return d, row.task_id


def _end(task_id: str, job_id: str, preempted: bool = True) -> fpb.FedTaskEnded:
    return fpb.FedTaskEnded(lm=0, task_id=task_id, preempted=preempted, job_id=job_id, state=common_pb2.TASK_KILLED,
                            reason=WHY if preempted else "")


def test_a_preempted_end_requeues_the_task_pending_with_why_once(tmp_path: Path) -> None:
    d, task_id = _daemon(tmp_path)
    assert d.gm.preempter is not None
    d._ended(0, _end(task_id, "J1"))
    row = d.store.tasks()[0]
    assert (row.state, row.attempt, row.reason, row.preemptions) == ("PENDING", 1, WHY, 1)
    assert [p.task.task_id for p in d.gm.queues["a"].items] == [task_id] and task_id not in d.gm.running
    assert d.preempted == 1
    d._ended(0, _end(task_id, "J1"))                      # the same end again: nothing more
    d._ended(0, _end(task_id, "J1", preempted=False))     # nor an old copy's plain end
    row = d.store.tasks()[0]
    assert (row.state, row.preemptions, len(d.gm.queues["a"].items)) == ("PENDING", 1, 1)
    d.store.close()


def test_an_earlier_copys_end_does_not_touch_the_running_one(tmp_path: Path) -> None:
    d, task_id = _daemon(tmp_path)
    d.store.placed(task_id, 0, 0, "J2")                   # it runs again, as LM job J2
    d._ended(0, _end(task_id, "J1"))                      # J1's end, heard late
    assert d.store.tasks()[0].state == "RUNNING" and task_id in d.gm.running
    d._ended(0, _end(task_id, "J2", preempted=False))
    assert d.store.tasks()[0].state == "CANCELLED" and task_id not in d.gm.running
    d.store.close()


def test_a_preemption_found_by_lookup_requeues_like_the_delta(tmp_path: Path) -> None:
    d, task_id = _daemon(tmp_path)
    d._requeue(task_id, WHY)
    row = d.store.tasks()[0]
    assert (row.state, row.attempt, row.reason, row.preemptions) == ("PENDING", 1, WHY, 1)
    d._requeue(task_id, WHY)                               # found twice: requeued once
    assert len(d.gm.queues["a"].items) == 1 and d.store.tasks()[0].preemptions == 1
    d.store.close()


def test_a_newer_lm_state_has_parked_tasks_tried_again(tmp_path: Path) -> None:
    """Room freed by another GM's tasks reaches this GM only in the LM's state: without a
    new view stamp its tasks parked for no room would wait forever."""
    d, task_id = _daemon(tmp_path)
    listed = [fpb.TaskOn(task_id=task_id, queue="a", node=0, req=fpb.Res(v=[1000, 256]))]   # no lookup
    node = fpb.FedNode(name="n1", cap=fpb.Res(v=[4000, 4096]), owner=0)
    d.on_update(0, fpb.LMUpdate(layout=fpb.LMLayout(lm=0, gms=1, nodes=[node], epoch=7, name="lm0")))
    full = fpb.LMState(lm=0, epoch=7, version=1, free=[fpb.Res(v=[0, 4096])], tasks=listed)
    d.on_update(0, fpb.LMUpdate(state=full))
    stamp = d.gm.stamp
    d.on_update(0, fpb.LMUpdate(state=fpb.LMState(lm=0, epoch=7, version=2, free=[fpb.Res(v=[4000, 4096])], tasks=listed)))
    assert d.gm.stamp > stamp
    stamp = d.gm.stamp
    d.on_update(0, fpb.LMUpdate(state=fpb.LMState(lm=0, epoch=7, version=2, free=[fpb.Res(v=[4000, 4096])], tasks=listed)))
    assert d.gm.stamp == stamp                            # the same state again: nothing new to try
    d.store.close()


def test_the_toml_keys_are_the_flags(tmp_path: Path) -> None:
    conf = tmp_path / "gm.toml"
    conf.write_text('lms = "lm0=h:1"\npreemption = true\n[shares]\na = 0.4\nb = 0.6\n')
    s = parse(["--config", str(conf)])
    assert s.preemption and s.queue_shares() == {"a": 0.4, "b": 0.6}


def _placing(tmp_path: Path) -> tuple[GMDaemon, str]:
    d = GMDaemon(settings_from({**BASE, "state_dir": str(tmp_path)}))
    d._store = GMStore(str(tmp_path))
    spec = jobs_pb2.JobSpec(queue="a", tasks=1, command=["true"], resources=common_pb2.Resources(cpu=1, memory=2**28))
    d.store.add_job(0, "a", "j", spec.SerializeToString(), 1, "")
    task_id = d.store.tasks()[0].task_id
    d.store.placing(task_id, 0, 0, 0, b"req")
    return d, task_id


@pytest.mark.parametrize("end_names_job", [True, False])
def test_an_end_heard_before_the_place_answer_keeps_the_lm_job(tmp_path: Path, end_names_job: bool) -> None:
    """The task ran and ended before its Place answer came (CI at 23a6bcf: a SUCCEEDED task
    showed no LM job): the end is kept and the job it ran as is shown, from the end or from
    the answer that comes after it."""
    d, task_id = _placing(tmp_path)
    end = fpb.FedTaskEnded(lm=0, task_id=task_id, job_id="J7" if end_names_job else "",
                           state=common_pb2.TASK_SUCCEEDED)
    d._ended(0, end)
    assert d.store.placed(task_id, 0, 1, "J7") is False            # the late answer: not running again
    row = d.store.tasks()[0]
    assert (row.state, row.lm_job, row.exit_code) == ("SUCCEEDED", "J7", 0)
    assert d.store.placed(task_id, 0, 1, "J8") is False and d.store.tasks()[0].lm_job == "J7"
    d.store.close()
