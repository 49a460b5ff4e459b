"""What tcl-gm takes and keeps (issue 35, the review's findings against the GM): the spec
check a master runs, sizes rounded up (never a 0 memory limit), a bounded spec cache, a
state dir only its owner reads, and SIGHUP that reports instead of killing the GM."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from tcluster.gm import daemon as gmdaemon
from tcluster.gm.daemon import GMDaemon, task_req
from tcluster.gm.main import on_sighup
from tcluster.gm.service import MAX_CONSTRAINTS, check_spec
from tcluster.gm.settings import settings_from
from tcluster.gm.store import GMStore
from tcluster.v1 import common_pb2, jobs_pb2

BASE = dict(name="gm0", index=0, lms="lm0=h:1", gms="gm0=h:5", queue_map="a=gm0")


def spec(**kw: object) -> jobs_pb2.JobSpec:
    base = dict(queue="a", tasks=1, command=["true"], resources=common_pb2.Resources(cpu=0.5, memory=2**28))
    return jobs_pb2.JobSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad, words", [
    (dict(env={"1BAD": "x"}), "env"),                         # the LM refused it; the GM resent it for ever
    (dict(constraints=[f"k{i}=v" for i in range(MAX_CONSTRAINTS + 1)]), f"at most {MAX_CONSTRAINTS}"),
    (dict(constraints=["rack"]), "is not key=value"),
    (dict(command=[]), "spec.command"),
    (dict(resources=common_pb2.Resources(cpu=0.5, memory=0)), "must both be > 0"),
])
def test_a_spec_an_lm_would_refuse_is_refused_at_the_gm_naming_the_field(bad: dict, words: str) -> None:
    error = check_spec(spec(**bad))
    assert error is not None and words in error, error


def test_a_good_spec_passes() -> None:
    assert check_spec(spec(env={"OK": "1"}, constraints=["rack=r1"])) is None


def test_sizes_round_up_never_to_zero() -> None:
    assert task_req(spec(resources=common_pb2.Resources(cpu=0.0001, memory=1000))) == (1, 1)   # was (0, 0)
    assert task_req(spec(resources=common_pb2.Resources(cpu=0.25, memory=2**28 + 1))) == (250, 257)


def test_the_spec_cache_keeps_the_most_recent_jobs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gmdaemon, "SPEC_CACHE_JOBS", 3)
    d = GMDaemon(settings_from({**BASE, "state_dir": str(tmp_path)}))
    d._store = GMStore(str(tmp_path))
    ids = [d.store.add_job(0, "a", "j", spec().SerializeToString(), 1, "") for _ in range(5)]
    for job_id in ids:
        assert d.spec_of(job_id).command == ["true"]
    assert list(d.specs) == ids[-3:]
    d.spec_of(ids[0])                                     # read again from the store
    assert list(d.specs) == [*ids[-2:], ids[0]]
    d.store.close()


def test_the_state_dir_is_its_owners_only(tmp_path: Path) -> None:
    state = tmp_path / "gm"
    state.mkdir(mode=0o755)
    GMStore(str(state)).close()                           # an existing dir is tightened too
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700


def test_sighup_reads_the_configuration_again_and_names_what_waits_for_a_restart(tmp_path: Path) -> None:
    argv = ["--name", "gm0", "--lms", "lm0=h:1", "--gms", "gm0=h:5", "--queue-map", "a=gm0",
            "--state-dir", str(tmp_path)]
    d = GMDaemon(settings_from({**BASE, "state_dir": str(tmp_path)}))
    assert on_sighup(d, argv) == "SIGHUP: configuration read again; nothing changed"
    assert "queue_map changed and take effect at the next start" in on_sighup(
        d, [*argv[:-4], "--queue-map", "a=gm0,b=gm0", *argv[-2:]])
    assert on_sighup(d, [*argv, "--view-max-age-s", "-1"]).startswith("SIGHUP: the configuration is not valid")
    root = logging.getLogger()
    level = root.level
    try:
        assert on_sighup(d, [*argv, "--log-level", "debug"]) == "SIGHUP: configuration read again; log level DEBUG applied"
        assert root.level == logging.DEBUG and d.s.log_level == "DEBUG"     # live, as on the master and agent
        assert on_sighup(d, [*argv, "--log-level", "debug"]) == "SIGHUP: configuration read again; nothing changed"
    finally:
        root.setLevel(level)
