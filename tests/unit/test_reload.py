"""SIGHUP's reload of the config file: live settings apply, the others are named as needing a
restart and keep their running values, a broken file changes nothing; systemd is told
RELOADING=1 then READY=1."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from tcluster.agent.main import build_parser as agent_parser
from tcluster.agent.main import settings_from_args as agent_settings
from tcluster.agent.reload import AgentReloader
from tcluster.daemonkit.configfile import load_args
from tcluster.master.app.main import build_parser as master_parser
from tcluster.master.app.main import settings_from_args as master_settings
from tcluster.master.app.reload import MasterReloader
from tcluster.daemonkit.sdnotify import Notifier

IDLE = SimpleNamespace(nodes={}, pending_jobs=set())
BASE = 'cpus = 2\nmemory = "1Gi"\nnode = "n1"\nstate_dir = "{dir}/state"\ntask_retention_s = 10\n'


def agent_reloader(tmp_path: Path, notifier: Notifier) -> tuple[AgentReloader, SimpleNamespace, Path]:
    conf = tmp_path / "agent.toml"
    conf.write_text(BASE.format(dir=tmp_path))
    parser = agent_parser()
    loaded = load_args(parser, ["--config", str(conf)])
    settings = agent_settings(loaded.args)
    agent = SimpleNamespace(settings=settings, tasks=SimpleNamespace(settings=settings))
    return AgentReloader(agent, parser, loaded, agent_settings, notifier), agent, conf   # type: ignore[arg-type]


def test_agent_applies_live_settings_and_names_the_rest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "n.sock"))
    listener.settimeout(2)
    reloader, agent, conf = agent_reloader(tmp_path, Notifier(str(tmp_path / "n.sock")))
    conf.write_text(BASE.format(dir=tmp_path).replace("task_retention_s = 10", "task_retention_s = 3\ncpus = 4")
                    .replace("cpus = 2\n", "") + 'default_user = "daemon"\nlog_level = "DEBUG"\n')
    with caplog.at_level(logging.INFO):
        later = reloader.reload()
    assert later == ["cpus"]
    assert agent.settings.task_retention_s == 3.0 and agent.tasks.settings.default_user == "daemon"
    assert agent.settings.cpus == 2.0                       # running value kept
    assert "cpus changed; they take effect after a restart" in caplog.text
    assert "reload: log level DEBUG" in caplog.text
    assert listener.recv(100).startswith(b"RELOADING=1\nMONOTONIC_USEC=")
    assert listener.recv(100) == b"READY=1\nSTATUS=reloaded"
    listener.close()


def test_a_broken_file_keeps_the_running_settings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reloader, agent, conf = agent_reloader(tmp_path, Notifier.disabled())
    before = agent.settings
    for text in ("task_retention_s = 'x'\n", "nonsense = 1\n", BASE.format(dir=tmp_path) + "task_retention_s = -1\n",
                 BASE.format(dir=tmp_path).replace('"1Gi"', '"lots"')):
        conf.write_text(text)
        assert reloader.reload() == []
        assert agent.settings is before
    assert caplog.text.count("reload refused, the running settings stay") == 4


def test_master_reload_applies_a_new_queue_file_and_names_the_rest(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "master.toml"
    conf.write_text(f'data_dir = "{tmp_path}/m"\nfairness = "mch"\n')
    parser = master_parser()
    loaded = load_args(parser, ["--config", str(conf)])
    reloaded: list[Path | None] = []
    service = SimpleNamespace(reload_queues=lambda: reloaded.append(service.settings.queues_file), state=IDLE,
                              use_settings=lambda settings: setattr(service, "settings", settings))
    master = SimpleNamespace(settings=master_settings(loaded.args), service=None, port=7070)
    service.settings = master.settings
    master.service = service
    reloader = MasterReloader(master, parser, loaded, master_settings, Notifier.disabled())  # type: ignore[arg-type]
    queues = tmp_path / "queues.yaml"
    conf.write_text(f'data_dir = "{tmp_path}/m"\nfairness = "drf"\nqueues = "{queues}"\n')
    with caplog.at_level(logging.INFO):
        assert reloader.reload() == ["fairness"]
    assert reloaded == [queues] and master.settings.fairness == "mch"
    assert "fairness changed; they take effect after a restart (systemctl restart tcl-master)" in caplog.text


def test_master_without_a_config_file_still_rereads_its_queues() -> None:
    calls: list[int] = []
    master = SimpleNamespace(settings=None, service=SimpleNamespace(reload_queues=lambda: calls.append(1), state=IDLE), port=1)
    MasterReloader(master, None, None, master_settings, Notifier.disabled()).reload()   # type: ignore[arg-type]
    assert calls == [1]


def test_live_settings_reach_every_part_of_the_service(tmp_path: Path) -> None:
    """The service's parts (Agents, Rounds) were built with its settings: a SIGHUP's copy must
    reach them too, or a setting made live would silently not apply where they read it."""
    from tcluster.master.service import MasterService
    from tcluster.master.settings import MasterSettings
    from tcluster.master.store.sqlite import Store

    settings = MasterSettings(data_dir=tmp_path)
    store = Store(tmp_path / "master.db")
    try:
        service = MasterService(settings, store)
        queues = tmp_path / "queues.yaml"
        service.use_settings(settings.model_copy(update={"queues_file": queues}))
        assert service.settings.queues_file == service.agents.settings.queues_file \
            == service.rounds.settings.queues_file == queues
    finally:
        store.close()
