"""The artefacts' parts that can be checked without building them: the wheel's shim name and
its use by the agent, the package's scripts and layout helpers, and the units' settings the
install and upgrade flow relies on. tests/vm installs, upgrades and purges the real package."""

from __future__ import annotations

import configparser
import importlib.util
import subprocess
from pathlib import Path

import pytest

from tcluster.agent.runtime import shimbin

REPO = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheel_names_its_shim_as_the_agent_looks_for_it() -> None:
    setup = load(REPO / "setup.py", "tcl_setup")       # not __main__: setup() does not run
    source = (REPO / "agent" / "shim.c").read_bytes()
    assert setup.shim_name(source) == shimbin.binary_name(source)


def test_the_agent_prefers_a_shipped_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "shim.c"
    source.write_bytes(b"int main(void) { return 2; }\n")
    monkeypatch.setattr(shimbin, "SOURCE", source)
    monkeypatch.delenv("TCL_SHIM", raising=False)
    monkeypatch.setenv("TCL_CACHE_DIR", str(tmp_path / "cache"))
    shipped = tmp_path / shimbin.binary_name(source.read_bytes())
    shipped.write_text("#!/bin/sh\nexit 2\n")
    shipped.chmod(0o755)
    assert shimbin.shim_binary() == shipped
    shipped.chmod(0o644)                         # not runnable: compiled on demand instead
    assert shimbin.shipped_binary(source.read_bytes()) is None


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str     # type: ignore[assignment,method-assign]
    parser.read(REPO / "systemd" / name)
    return parser


@pytest.mark.parametrize("name", ["tcl-agent.service", "tcl-master.service", "tcl-gm.service"])
def test_units_are_notify_with_a_watchdog_and_read_their_config(name: str) -> None:
    service = unit(name)["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert int(service["WatchdogSec"]) >= 10
    assert "--config /etc/tcluster/" in service["ExecStart"]
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["Restart"] == "on-failure"     # a watchdog abort counts as a failure


def test_the_agent_unit_lets_tasks_outlive_a_restart() -> None:
    service = unit("tcl-agent.service")["Service"]
    assert (service["KillMode"], service["Delegate"]) == ("process", "yes")


@pytest.mark.parametrize("script", ["packaging/deb/tcluster.postinst", "packaging/deb/tcluster.prerm",
                                    "packaging/deb/tcluster.postrm", "packaging/deb/tcluster-master.postinst",
                                    "packaging/deb/tcluster-master.prerm", "packaging/deb/tcluster-master.postrm",
                                    "install.sh"])
def test_shell_scripts_parse(script: str) -> None:
    done = subprocess.run(["sh", "-n", str(REPO / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_conffiles_are_the_config_files_the_packages_ship() -> None:
    """build_deb lists every file under /etc as a conffile; these are the ones it ships."""
    build = (REPO / "packaging" / "build_deb.py").read_text()
    for conf in ("agent.toml", "master.toml", "gm.toml"):
        assert f'"{conf}"' in build and (REPO / "systemd" / conf).exists()


def test_shipped_config_files_load(tmp_path: Path) -> None:
    from tcluster.agent.main import build_parser as agent_parser
    from tcluster.daemonkit.configfile import load_args
    from tcluster.master.app.main import build_parser as master_parser
    agent = load_args(agent_parser(), ["--config", str(REPO / "systemd" / "agent.toml")])
    master = load_args(master_parser(), ["--config", str(REPO / "systemd" / "master.toml")])
    assert agent.args.state_dir == Path("/var/lib/tcluster/agent")
    assert master.args.data_dir == Path("/var/lib/tcluster/master")
    from tcluster.gm.settings import parse as gm_settings
    # lms has no default (the operator names the clusters): given here as TCL_GM_ARGS would.
    gm = gm_settings(["--config", str(REPO / "systemd" / "gm.toml"), "--lms", "lm0=127.0.0.1:7070"])
    assert gm.state_dir == "/var/lib/tcluster/gm"


def test_the_package_ships_every_unit_and_config_file_and_the_gm_unit_keeps_its_state_private() -> None:
    build = (REPO / "packaging" / "build_deb.py").read_text()
    for unit_name in ("tcl-agent.service", "tcl-master.service", "tcl-gm.service"):
        assert f'"{unit_name}"' in build and (REPO / "systemd" / unit_name).exists()
    assert '"gm.toml"' in build and "tcl-gm" in build
    service = unit("tcl-gm.service")["Service"]
    assert service["StateDirectory"] == "tcluster/gm" and service["StateDirectoryMode"] == "0700"
    for script in ("postinst", "prerm", "postrm"):
        assert "tcl-gm.service" in (REPO / "packaging" / "deb" / f"tcluster-master.{script}").read_text()


def test_the_gm_loop_pings_the_watchdog_each_turn() -> None:
    import asyncio
    from types import SimpleNamespace
    from tcluster.gm.placing import Placer
    pings: list[int] = []
    port = SimpleNamespace(age_views=lambda now: None, unanswered=[], wake=asyncio.Event(),
                           gm=SimpleNamespace(decide=lambda: None))
    placer = Placer(port, lambda task_id: False)      # type: ignore[arg-type]
    placer.after_turn = lambda: pings.append(1)

    async def two_turns() -> None:
        port.wake.set()
        loop = asyncio.ensure_future(placer.run())
        while len(pings) < 2:
            port.wake.set()
            await asyncio.sleep(0.01)
        loop.cancel()
    asyncio.run(asyncio.wait_for(two_turns(), 30))
    assert len(pings) >= 2


def test_build_helpers(tmp_path: Path) -> None:
    build = load(REPO / "packaging" / "build_deb.py", "tcl_build_deb")
    for name in ("tcluster-0.2.0.dist-info", "PyYAML-6.0.4.dist-info", "grpcio-1.85.3.dist-info"):
        (tmp_path / name).mkdir()
    assert build.requirements(tmp_path) == "grpcio==1.85.3\nPyYAML==6.0.4\ntcluster==0.2.0\n"
    assert build.wrapper("tcluster.agent.main").startswith("#!/opt/tcluster/venv/bin/python\n")
    src = tmp_path / "src"
    (src / "tcluster").mkdir(parents=True)
    (src / "pyproject.toml").write_text('[project]\nname = "tcluster"\nversion = "0.1.0"\n')
    (src / "tcluster" / "__init__.py").write_text('"""x"""\n__version__ = "0.1.0"\n')
    build.run = lambda *args, cwd=None: "pyproject.toml\0tcluster/__init__.py\0"   # what git ls-files would list
    build.REPO = src
    stage = tmp_path / "stage"
    build.stage_source(stage, "0.1.1")
    assert 'version = "0.1.1"' in (stage / "pyproject.toml").read_text()
    assert '__version__ = "0.1.1"' in (stage / "tcluster" / "__init__.py").read_text()


def test_prune_keeps_our_package_and_what_dependencies_import(tmp_path: Path) -> None:
    build = load(REPO / "packaging" / "build_deb.py", "tcl_build_deb_prune")
    for name in ("numpy/__init__.py", "numpy/core/tests/test_x.py", "numpy/core/x.pyi", "numpy/core/include/a.h",
                 "tcluster/agent/shim.c", "tcluster/tests/keep.py", "tcluster/x.pyi", "scipy/tests/t.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    build.prune(tmp_path)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["numpy/__init__.py", "tcluster/agent/shim.c", "tcluster/tests/keep.py", "tcluster/x.pyi"]
