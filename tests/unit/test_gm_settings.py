"""tcl-gm's settings errors and the GM daemon's pure helpers."""

from __future__ import annotations

import pytest

from tcluster.daemonkit.configfile import ConfigError
from tcluster.gm.main import main
from tcluster.gm.service import check_spec, job_state
from tcluster.gm.settings import parse, settings_from
from tcluster.gm.wire import Layout, Vocabulary, layout_from
from tcluster.v1 import common_pb2, federation_pb2 as fpb, jobs_pb2

BASE = dict(name="gm1", index=1, lms="lm0=h:1|h2:1,lm1=h:2", gms="gm0=h:5,gm1=h:6", queue_map="a=gm0,b=gm1")


def test_settings_parse_lists_ha_lms_and_queue_map() -> None:
    s = settings_from(BASE)
    assert s.lms == [("lm0", ["h:1", "h2:1"]), ("lm1", ["h:2"])]
    assert s.queue_map == {"a": "gm0", "b": "gm1"} and s.gm_names() == ["gm0", "gm1"]


@pytest.mark.parametrize("change, words", [
    (dict(lms=""), "--lms"),
    (dict(lms="lm0"), "NAME=VALUE"),
    (dict(queue_map="a=gm9"), "gm9"),
    (dict(index=0), "--index"),
    (dict(name="gmx"), "--name"),
    (dict(listen="nowhere"), "--listen"),
    (dict(etcd="nohostport"), "--etcd"),
    (dict(etcd="h:1", etcd_prefix="no-slash"), "--etcd-prefix"),
    (dict(etcd="h:1", member_ttl_s=1), "--member-ttl-s"),
])
def test_settings_errors_name_the_field(change: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        settings_from({**BASE, **change})


def test_etcd_settings_and_a_map_naming_gms_known_only_to_etcd() -> None:
    s = settings_from({**BASE, "etcd": "h:2379,h2:2379", "gms": "", "name": "gm0", "index": 0,
                       "queue_map": "a=gm0,b=gm7"})
    assert (s.etcd_prefix, s.member_ttl_s, s.queue_map["b"]) == ("/tcluster-gm", 10, "gm7")


def test_queues_command_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queues", "set", "broken", "--etcd", "h:1"]) == 2
    assert "queues: 'broken' is not NAME=VALUE" in capsys.readouterr().err
    assert main(["queues", "set", "--etcd", "h:1"]) == 2
    assert "name the queues" in capsys.readouterr().err
    assert main(["queues", "list", "--etcd", "nohostport"]) == 2


def test_bad_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lms", "broken"]) == 2
    assert "--lms" in capsys.readouterr().err


def test_check_spec() -> None:
    good = jobs_pb2.JobSpec(tasks=2, command=["true"], resources=common_pb2.Resources(cpu=1, memory=1 << 20))
    assert check_spec(good) is None
    bad = jobs_pb2.JobSpec(); bad.CopyFrom(good); bad.constraints.append("arch in (x86_64)")
    assert "spec.constraints" in check_spec(bad)
    bad = jobs_pb2.JobSpec(); bad.CopyFrom(good); bad.tasks = 0
    assert "spec.tasks" in check_spec(bad)


def test_job_state() -> None:
    assert job_state(["PENDING", "PENDING"]) == "PENDING"
    assert job_state(["RUNNING", "PENDING"]) == "RUNNING"
    assert job_state(["SUCCEEDED", "LOST"]) == "FAILED"
    assert job_state(["SUCCEEDED", "SUCCEEDED"]) == "SUCCEEDED"


def test_vocabularies_of_two_lms_map_into_one() -> None:
    vocab = Vocabulary()
    vocab.bit("zone=x")      # another LM's word first: this LM's bits must be translated
    msg = fpb.LMLayout(lm=0, gms=2, epoch=3, constraints=["rack=r1", "zone=x"], nodes=[
        fpb.FedNode(name="n0", cap=fpb.Res(v=[1000, 10]), cmask=0b01, owner=0),
        fpb.FedNode(name="n1", cap=fpb.Res(v=[1000, 10]), cmask=0b10, owner=1)])
    lay: Layout = layout_from(msg, vocab)
    assert [n.cmask for n in lay.pure.nodes] == [1 << vocab.bits["rack=r1"], 1 << vocab.bits["zone=x"]]
    pc = vocab.mask(["rack=r1"])
    assert lay.local_pc(pc, vocab) == 0b01 and lay.epoch == 3 and lay.names == ("n0", "n1")


def test_a_config_file_error_names_the_file_line_and_key(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "gm.toml"
    conf.write_text('name = "gm0"\ngms = "gm0=h:5"\nqueue-map = "a=gm9"\nlms = "lm0=h:1"\n')
    with pytest.raises(ConfigError, match=f"{conf}:3: queue-map: queue 'a' maps to 'gm9'"):
        parse(["--config", str(conf)])
    assert parse(["--config", str(conf), "--queue-map", "a=gm0"]).queue_map == {"a": "gm0"}   # the flag wins
    conf.write_text('lms = "lm0=h:1"\nlmz = 1\n')
    assert main(["--config", str(conf)]) == 2
    assert f"tcl-gm: {conf}:2: unknown key 'lmz'; did you mean lms?" in capsys.readouterr().err
    conf.write_text('lms = "lm0"\n')
    with pytest.raises(ConfigError, match=f"{conf}:1: lms: 'lm0' is not NAME=VALUE"):
        parse(["--config", str(conf)])


def test_config_tables_and_arrays_are_the_settings_as_they_are(tmp_path) -> None:
    conf = tmp_path / "gm.toml"
    conf.write_text('lms = [["lm0", ["h:1", "h2:1"]]]\nindex = 0\n[queue_map]\na = "gm0"\n[lm_tls]\nlm0 = "/d"\n')
    s = parse(["--config", str(conf)])
    assert (s.lms, s.queue_map, s.lm_tls) == ([("lm0", ["h:1", "h2:1"])], {"a": "gm0"}, {"lm0": "/d"})


def test_tcl_gm_tells_systemd_it_is_ready_and_stopping(tmp_path) -> None:
    import asyncio
    import os
    import signal
    import socket
    from types import SimpleNamespace

    from tcluster.gm.main import _run
    from tcluster.daemonkit.sdnotify import Notifier

    class Daemon:                     # what _run touches of a GMDaemon
        s, port, stopped = SimpleNamespace(name="gm0", http=""), 7080, False
        placer = SimpleNamespace(after_turn=None)     # gets the watchdog ping

        async def start(self) -> None:
            pass

        async def stop(self) -> None:
            self.stopped = True

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(2)
    daemon = Daemon()

    async def run() -> None:
        running = asyncio.ensure_future(_run(daemon, Notifier(str(tmp_path / "notify.sock"))))   # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
        await running
    asyncio.run(run())
    assert sock.recv(4096).decode().split("\n") == ["READY=1", "STATUS=gm0 serving on port 7080"]
    assert callable(daemon.placer.after_turn)
    assert sock.recv(4096).decode() == "STOPPING=1" and daemon.stopped
    sock.close()
