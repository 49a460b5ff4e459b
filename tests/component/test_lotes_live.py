"""`--placement lotes` in the live master: plans solved off the loop, bins told to agents,
class mixes in heartbeats and `ListNodes`, re-solves, and the anbf fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run, wait_until

GiB = 2**30
# Two configurations, each made for one class: the plan is exact (bins fill the machines).
#   cpu-rich: 8 cpu, 2Gi   -> 4 x cpu-job (2 cpu, 0.5Gi); a mem-job (4Gi) does not fit
#   mem-rich: 2 cpu, 16Gi  -> 4 x mem-job (0.5 cpu, 4Gi)
CLASSES = """classes:
  - {name: cpu-job, request: {cpu: 2, memory: 512Mi}, share: 0.5}
  - {name: mem-job, request: {cpu: 0.5, memory: 4Gi}, share: 0.5}
"""


def _running(job: jobs_pb2.Job) -> bool:
    return all(t.state == common_pb2.TASK_RUNNING for t in job.tasks)


async def _nodes(h: Harness) -> jobs_pb2.ListNodesResponse:
    return await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())


async def _cluster(h: Harness, tmp: Path) -> None:
    path = tmp / "classes.yaml"
    path.write_text(CLASSES)
    await h.start_master(placement="lotes", lotes_classes_file=path, lotes_min_interval_s=0)
    for name in ("a1", "a2"):
        await h.add_agent(name, cpus=8, memory=2 * GiB)
    for name in ("b1", "b2"):
        await h.add_agent(name, cpus=2, memory=16 * GiB)


async def _solved(h: Harness, solves: int = 1) -> jobs_pb2.ListNodesResponse:
    async def check() -> jobs_pb2.ListNodesResponse | None:
        r = await _nodes(h)
        ready = all(n.lotes.config for n in r.nodes if n.state == "READY")
        return r if r.lotes.solves >= solves and not r.lotes.fallback and ready else None
    return await wait_until(check)  # type: ignore[return-value]


def test_tasks_follow_the_plans_bins_and_nodes_show_target_and_actual(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _cluster(h, tmp_path)
        r = await _solved(h)
        assert r.placement == "lotes" and list(r.lotes.classes) == ["cpu-job", "mem-job"]
        assert r.lotes.solve_seconds > 0 and "solved in" in r.lotes.last_solve
        targets = {n.name: dict(n.lotes.target) for n in r.nodes}
        assert targets == {"a1": {0: 4}, "a2": {0: 4}, "b1": {1: 4}, "b2": {1: 4}}
        assert {n.lotes.config for n in r.nodes if n.name.startswith("a")} != \
            {n.lotes.config for n in r.nodes if n.name.startswith("b")}
        # Agents were told their bins at registration or after the solve.
        async def told() -> bool:
            return all(dict(h.agents[n].agent.bin_target.counts) == targets[n]
                       for n in targets if h.agents[n].agent.bin_target is not None) \
                and all(h.agents[n].agent.bin_target is not None for n in targets)
        await wait_until(told)
        # mem-jobs first: anbf would pack them anywhere; lotes sends them to the mem-rich bins.
        mem = await h.submit(["sleep"], cpu=0.5, memory=4 * GiB, tasks=8)
        cpu = await h.submit(["sleep"], cpu=2, memory=GiB // 2, tasks=8)
        mem = await h.wait_job(mem.id, _running)
        cpu = await h.wait_job(cpu.id, _running)
        assert sorted(t.node for t in mem.tasks) == ["b1"] * 4 + ["b2"] * 4
        assert sorted(t.node for t in cpu.tasks) == ["a1"] * 4 + ["a2"] * 4
        assert {t.lotes_class for t in mem.tasks} == {1} and {t.lotes_class for t in cpu.tasks} == {0}

        async def mixes_match() -> bool:   # heartbeats carry the agents' own class mixes
            nodes = (await _nodes(h)).nodes
            return all(dict(n.lotes.actual) == targets[n.name] == dict(n.lotes.counted) for n in nodes)
        await wait_until(mixes_match)
        assert h.agents["a1"].agent.class_mix() == {0: 4}
        # Ends leave the book: cancelling the cpu-jobs empties the cpu-rich nodes' counts.
        await h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=cpu.id))

        async def emptied() -> bool:
            nodes = {n.name: n for n in (await _nodes(h)).nodes}
            return all(not dict(nodes[n].lotes.counted) and not dict(nodes[n].lotes.actual) for n in ("a1", "a2"))
        await wait_until(emptied)
    run(scenario, tmp_path)


def test_a_new_configuration_triggers_a_resolve(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await _cluster(h, tmp_path)
        first = await _solved(h)
        await h.add_agent("c1", cpus=4, memory=8 * GiB)      # a third configuration
        r = await _solved(h, first.lotes.solves + 1)
        assert "machine configurations changed" in r.lotes.last_solve
        assert len({n.lotes.config for n in r.nodes}) == 3 or not dict(
            next(n for n in r.nodes if n.name == "c1").lotes.target)
        # The node that leaves takes its configuration with it: another solve.
        solves = r.lotes.solves
        h.agents["c1"].task.cancel()
        r = await _solved(h, solves + 1)
        assert "machine configurations changed" in r.lotes.last_solve
        assert all(n.lotes.config for n in r.nodes if n.state == "READY")
    run(scenario, tmp_path)


def test_without_scipy_lotes_falls_back_to_anbf_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tcluster.scheduler.lotes.lp", None)   # `import` raises ImportError

    async def scenario(h: Harness) -> None:
        await _cluster(h, tmp_path)

        async def fell_back() -> jobs_pb2.ListNodesResponse | None:
            r = await _nodes(h)
            return r if r.lotes.solves >= 1 else None
        r = await wait_until(fell_back)
        assert "falls back to anbf" in r.lotes.fallback and "scipy" in r.lotes.fallback
        assert all(not n.lotes.config for n in r.nodes)
        job = await h.wait_job((await h.submit(["sleep"], cpu=2, memory=GiB // 2, tasks=2)).id, _running)
        assert all(not t.HasField("lotes_class") for t in job.tasks)
        assert h.agents["a1"].agent.bin_target is not None and h.agents["a1"].agent.bin_target.config == ""
    run(scenario, tmp_path)


def test_learned_classes_solve_once_tasks_arrive(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(placement="lotes", lotes_k=2, lotes_min_interval_s=0)
        await h.add_agent("a1", cpus=8, memory=2 * GiB)
        await h.add_agent("b1", cpus=2, memory=16 * GiB)
        r = await _nodes(h)
        assert "no job classes yet" in r.lotes.fallback and r.lotes.solves == 0
        mem = await h.submit(["sleep"], cpu=0.5, memory=4 * GiB, tasks=2)
        cpu = await h.submit(["sleep"], cpu=2, memory=GiB // 2, tasks=2)
        await h.wait_job(mem.id, _running)
        await h.wait_job(cpu.id, _running)
        r = await _solved(h)
        assert len(r.lotes.classes) == 2 and r.lotes.classes_source.startswith("learned")

        async def counted() -> bool:   # tasks placed before the plan are recounted under it
            nodes = (await _nodes(h)).nodes
            return sum(sum(n.lotes.counted.values()) for n in nodes) == 4
        await wait_until(counted)
    run(scenario, tmp_path)


def test_a_bad_classes_file_stops_the_master_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tcluster.master.app.main import build_parser, main as master_main, settings_from_args
    bad = tmp_path / "classes.yaml"
    bad.write_text("classes:\n  - {name: a, request: {cpu: 1}, share: -1}\n")
    assert master_main(["--placement", "lotes", "--lotes-classes", str(bad), "--data-dir", str(tmp_path),
                        "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert "--lotes-classes" in err and "classes.yaml:2" in err
    args = build_parser().parse_args(["--placement", "lotes", "--lotes-k", "3", "--lotes-config-label", "rack"])
    settings = settings_from_args(args)
    assert (settings.lotes_k, settings.lotes_config_label, settings.lotes_classes_file) == (3, "rack", None)
