"""`tcl --federation`: where the flag comes from, which submit flags a federated job takes
(the others are usage errors naming the flag, exit 2), the spec it sends, and the tables
and JSON it prints (pure, `now` given)."""

from __future__ import annotations

import json

import pytest

from tcluster.cli.federation import federated_spec, unsupported_submit_flags
from tcluster.cli.fedtables import job_json, job_view, jobs_table, status_json, status_tables
from tcluster.cli.main import build_parser, main
from tcluster.domain.errors import InvalidArgument
from tcluster.v1 import federation_pb2 as fpb


def parse(argv: list[str]):
    return build_parser(argv).parse_args(argv)


def test_federation_comes_from_the_flag_then_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("TCL_FEDERATION", "g1:7080,g2:7080")
    assert parse(["list"]).federation == "g1:7080,g2:7080"
    assert parse(["--federation", "x:1", "list"]).federation == "x:1"
    assert parse(["list", "--federation", "y:2"]).federation == "y:2"
    monkeypatch.delenv("TCL_FEDERATION")
    assert parse(["status", "f0-1"]).federation == ""


@pytest.mark.parametrize("argv, flag", [
    (["--gpus", "1"], "--gpus"), (["--image", "alpine"], "--image"), (["--wait"], "--wait"),
    (["-f", "job.yaml"], "--file"), (["--user", "bob"], "--user"), (["--dependency", "afterok:1"], "--dependency"),
])
def test_unsupported_submit_flags_are_usage_errors_naming_the_flag(capsys, argv, flag) -> None:
    code = main(["--federation", "127.0.0.1:1", "submit", *argv, "--", "true"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {flag}: a federated job does not support it"), err


def test_federation_only_commands_need_gms(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TCL_FEDERATION", raising=False)
    assert main(["list"]) == 2 and "--federation" in capsys.readouterr().err
    assert main(["federation", "status"]) == 2 and "$TCL_FEDERATION" in capsys.readouterr().err
    assert main(["--federation", "nohost", "list"]) == 2 and "--federation" in capsys.readouterr().err
    assert main(["--federation", "127.0.0.1:1", "cancel", "f0-1", "--tasks", "1"]) == 2
    assert "--tasks" in capsys.readouterr().err
    assert main(["--federation", "127.0.0.1:1", "list", "--limit", "1001"]) == 2


def test_the_supported_flags_build_the_spec() -> None:
    args = parse(["--federation", "g:1", "submit", "--queue", "a", "--tasks", "3", "--cpu", "0.5", "--mem", "64Mi",
                  "--constraint", "disk=ssd", "--env", "K=V", "--name", "n", "--", "sh", "-c", "exit 0"])
    assert unsupported_submit_flags(args) == []
    spec = federated_spec(args)
    assert (spec.queue, spec.tasks, spec.name, list(spec.command)) == ("a", 3, "n", ["sh", "-c", "exit 0"])
    assert (spec.resources.cpu, spec.resources.memory) == (0.5, 64 << 20)
    assert list(spec.constraints) == ["disk=ssd"] and dict(spec.env) == {"K": "V"} and spec.request_id
    with pytest.raises(InvalidArgument, match="--constraint"):
        federated_spec(parse(["submit", "--constraint", "disk!=hdd", "--", "true"]))


def test_an_array_with_a_throttle_goes_to_the_gm_as_given() -> None:
    args = parse(["--federation", "g:1", "submit", "--array", "0-15%4", "--", "true"])
    assert unsupported_submit_flags(args) == []
    assert federated_spec(args).array == "0-15%4"


def fed_job() -> fpb.FedJob:
    return fpb.FedJob(id="f0-7", queue="a", gm="gm0", state="RUNNING", submitted_at=1000.0, name="train", tasks=[
        fpb.FedTaskStatus(index=0, state="RUNNING", lm="lm1", node="n3", job_id="j9", attempts=1),
        fpb.FedTaskStatus(index=1, state="SUCCEEDED", lm="lm0", node="n1", job_id="j2", attempts=2),
        fpb.FedTaskStatus(index=2, state="PENDING")])


def test_job_tables_and_json() -> None:
    table = jobs_table([fed_job()], now=1090.0).splitlines()
    assert table[0].split() == ["ID", "NAME", "QUEUE", "GM", "STATE", "TASKS", "SUBMITTED"]
    assert table[1].split() == ["f0-7", "train", "a", "gm0", "RUNNING", "1/3", "done", "1m"]
    view = job_view(fed_job(), now=1090.0)
    assert view.startswith("job f0-7 (train): RUNNING\nqueue a, owned by GM gm0")
    rows = [line.split() for line in view.splitlines()[3:]]
    assert rows[0][:3] == ["TASK", "STATE", "LM"] and rows[2] == ["1", "SUCCEEDED", "lm0", "n1", "j2", "2", "0", "-"]
    assert rows[3] == ["2", "PENDING", "-", "-", "-", "0", "-", "-"]
    doc = json.loads(json.dumps(job_json(fed_job())))
    assert doc["id"] == "f0-7" and doc["tasks"][2] == {"index": 2, "state": "PENDING", "lm": None, "node": None,
                                                       "lm_job": None, "attempts": 0, "exit_code": 0, "reason": "",
                                                       "preemptions": 0}


def test_status_tables_and_json_include_a_gm_that_did_not_answer() -> None:
    st = fpb.FedStatus(gm="gm0", gms=[fpb.GMInfo(name="gm0", address="h:1", alive=True, queues=["a"], pending=2,
                                                 launches=5, repartitions=1, inconsistencies=0, preemptions=3)],
                       lms=[fpb.LMInfo(name="lm0", address="m:7070", epoch=3, nodes=4, partition_nodes=[2, 2],
                                       view_age_s=0.4, connected=True, free=fpb.Res(v=[1500, 2048]))])
    doc = status_json([("h:1", st), ("h:2", None)])
    assert [g["alive"] for g in doc["gms"]] == [True, False] and doc["gms"][1]["address"] == "h:2"
    assert doc["lms"][0]["free"] == {"cpu": 1.5, "memory": 2 << 30} and doc["lms"][0]["seen_by"] == "gm0"
    lines = status_tables(doc).splitlines()
    assert lines[1].split() == ["gm0", "h:1", "yes", "a", "2", "5", "1", "0", "3"]
    assert lines[2].split() == ["-", "h:2", "NO", "-", "-", "-", "-", "-", "-"]
    assert lines[5].split() == ["gm0", "lm0", "m:7070", "3", "4", "2/2", "0.4s", "yes", "1.5", "2Gi"]
    assert doc["members"] == [] and "MEMBER" not in status_tables(doc)      # static membership: no table


def test_status_shows_etcd_members_with_the_queues_taken_over() -> None:
    members = [fpb.GMInfo(name="gm0", index=0, address="h:1", alive=False, queues=[]),
               fpb.GMInfo(name="gm1", index=1, address="h:2", alive=True, queues=["a", "b"], taken_over=["a"])]
    st = fpb.FedStatus(gm="gm1", gms=[fpb.GMInfo(name="gm1", index=1, address="h:2", alive=True, queues=["a", "b"],
                                                 taken_over=["a"])],
                       membership="etcd 127.0.0.1:2379 prefix /tcluster-gm", members=members)
    doc = status_json([("h:1", None), ("h:2", st)])
    assert doc["membership"] == "etcd 127.0.0.1:2379 prefix /tcluster-gm" and doc["gms"][1]["taken_over"] == ["a"]
    assert [m["alive"] for m in doc["members"]] == [False, True]
    lines = status_tables(doc).splitlines()
    start = lines.index("membership: etcd 127.0.0.1:2379 prefix /tcluster-gm")
    assert lines[start + 2].split() == ["gm0", "0", "h:1", "NO", "-", "-"]
    assert lines[start + 3].split() == ["gm1", "1", "h:2", "yes", "a,b", "a"]


class FakeGMs:
    """GMClient's surface for `list`: each address a GM with its jobs (newest last) and a page size."""

    def __init__(self, jobs: dict[str, list[fpb.FedJob] | None]) -> None:
        self.addresses, self.timeout_s, self.jobs, self.asked = tuple(jobs), 1.0, jobs, []
        self.address = self.addresses[0]

    def stub(self, address: str) -> FakeGMs:
        self.at = address
        return self

    def List(self, request: fpb.FedListRequest, timeout: float) -> fpb.FedListResponse:
        import grpc

        class Unavailable(grpc.RpcError):
            def code(self) -> grpc.StatusCode:
                return grpc.StatusCode.UNAVAILABLE
        self.asked.append((self.at, request.page_token))
        jobs = self.jobs[self.at]
        if jobs is None:
            raise Unavailable()
        newest = jobs[::-1]
        start = int(request.page_token or 0)
        page = newest[start:start + request.limit]
        more = start + request.limit < len(newest)
        return fpb.FedListResponse(jobs=page, next_page_token=str(start + request.limit) if more else "")


def jobs_at(gm: int, times: list[float]) -> list[fpb.FedJob]:
    return [fpb.FedJob(id=f"f{gm}-{i + 1}", gm=f"gm{gm}", state="PENDING", submitted_at=t) for i, t in enumerate(times)]


def test_list_merges_the_gms_newest_first_pages_through_with_all_and_skips_a_gm_down(capsys) -> None:
    from tcluster.cli.federation import list_jobs
    gms = FakeGMs({"a:1": jobs_at(0, [1, 3, 5]), "b:1": jobs_at(1, [2, 4]), "c:1": None})
    args = parse(["--federation", "a:1,b:1,c:1", "-o", "json", "list", "--limit", "2"])
    assert list_jobs(args, gms) == 0
    out = capsys.readouterr()
    assert [j["id"] for j in json.loads(out.out)] == ["f0-3", "f1-2"]
    assert "newest 2 jobs; --all" in out.err and "GM c:1 did not answer" in out.err
    args = parse(["--federation", "a:1,b:1,c:1", "-o", "json", "list", "--limit", "2", "--all"])
    gms.asked.clear()
    assert list_jobs(args, gms) == 0
    out = capsys.readouterr()
    assert [j["id"] for j in json.loads(out.out)] == ["f0-3", "f1-2", "f0-2", "f1-1", "f0-1"]
    assert gms.asked == [("a:1", ""), ("a:1", "2"), ("b:1", ""), ("c:1", "")] and "--all" not in out.err


def test_the_batch_flags_that_make_sense_across_clusters_are_taken(monkeypatch) -> None:
    """Issue 35: each LM applies them to a task as it would to its own job's."""
    monkeypatch.setenv("SWEEP_SEED", "42")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    args = parse(["--federation", "g:1", "submit", "--time-limit", "1:30:00", "--export", "SWEEP_SEED,MODE=fast",
                  "--stdout-file", "/data/out.%j.%t", "--stderr-file", "/data/err.%j.%t", "--", "true"])
    assert unsupported_submit_flags(args) == []
    spec = federated_spec(args)
    assert spec.time_limit_s == 5400 and spec.stdout_file == "/data/out.%j.%t" and spec.stderr_file == "/data/err.%j.%t"
    assert dict(spec.env) == {"SWEEP_SEED": "42", "MODE": "fast"}     # only what --export names
    assert dict(federated_spec(parse(["--federation", "g:1", "submit", "--", "true"])).env) == {}
