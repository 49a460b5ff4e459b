"""The two Debian packages (issue 37): `tcluster` (tcl, tcl-agent) carries no library that
only tcl-master and tcl-gm import, so an agent node gets no numpy or scipy; the split is by
distribution (packaging/build_deb.py), checked here on a fake site-packages. The units'
least privilege: the master and the GM as the tcluster user with systemd-analyze's
exposure <= 3.0 (offline, where systemd-analyze runs), the agent with nothing that would
break its tasks, and no unit restarting on a config error (exit 2). tests/vm builds the
real packages, reads their contents and installs them in a systemd guest."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DEB = REPO / "packaging" / "deb"
UNITS = ("tcl-agent.service", "tcl-master.service", "tcl-gm.service")
# The import names of build_deb.MASTER_ONLY's distributions.
IMPORT_NAMES = {"numpy": "numpy", "scipy": "scipy", "aiohttp": "aiohttp", "prometheus-client": "prometheus_client",
                "orjson": "orjson", "aetcd": "aetcd", "cryptography": "cryptography"}
# tcl dev runs a master and an agent in one process (devsecure: its CA and tokens): a
# tcluster-master command in all but name. shimbuild is a script (`python -m`): it builds the
# supervisor and exits.
NOT_IMPORTED = {"tcluster.cli.devmode", "tcluster.cli.devsecure", "tcluster.agent.shimbuild"}


def builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tcl_build_deb_split", REPO / "packaging" / "build_deb.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unit(name: str) -> dict[str, list[str]]:
    """[Service] of a unit, each key's values in order (SystemCallFilter= appears twice)."""
    values: dict[str, list[str]] = {}
    section = ""
    for line in (REPO / "systemd" / name).read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_the_agent_and_tcl_import_no_library_of_the_master_package() -> None:
    """Every module of tcluster.agent and tcluster.cli, in one fresh interpreter: none of
    them (tcl dev aside) loads a library the tcluster package does not carry."""
    assert set(IMPORT_NAMES) == builder().MASTER_ONLY
    probe = f"""
import importlib, json, pkgutil, sys
import tcluster.agent, tcluster.cli
skip = {sorted(NOT_IMPORTED)!r}
for package in (tcluster.agent, tcluster.cli):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name not in skip:
            importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = set(json.loads(done.stdout.splitlines()[-1]))
    assert "tcluster.agent.main" in modules and "tcluster.cli.main" in modules    # the probe saw them
    assert sorted(m for m in modules if m.split(".")[0] in IMPORT_NAMES.values()) == []
    # Nor one of tcluster's own subpackages that go to tcluster-master.
    assert sorted(m for m in modules if m.split(".")[:2][-1] in builder().MASTER_MODULES and m.startswith("tcluster.")) == []


def test_the_cli_names_the_same_subpackages_as_the_split() -> None:
    from tcluster.cli.main import MASTER_PACKAGE_MODULES
    assert set(MASTER_PACKAGE_MODULES) == {f"tcluster.{m}" for m in builder().MASTER_MODULES}
    tops = {p.name for p in (REPO / "tcluster").iterdir()} | {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert {m.split(".")[1] for m in MASTER_PACKAGE_MODULES} <= tops   # each one exists


def fake_site(site: Path) -> None:
    """tcluster needs numpy, aiohttp and grpcio; aiohttp needs yarl and idna; docker (kept)
    needs idna too; numpy's files include a .libs directory beside it."""
    dists = {"tcluster": ["numpy", "aiohttp>=3", "grpcio (>=1.8)", "pytest; extra == 'test'", "docker"],
             "numpy": [], "aiohttp": ["yarl", "idna>=2"], "yarl": ["idna"], "idna": [], "grpcio": [],
             "docker": ["idna ; python_version >= '3'"], "pytest": []}
    for name, needs in dists.items():
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                       + "".join(f"Requires-Dist: {n}\n" for n in needs))
        files = [f"{name}/__init__.py", f"{info.name}/METADATA"] + (["numpy.libs/libopenblas.so"] if name == "numpy" else [])
        if name == "tcluster":   # its own subpackages: the agent's, tcl's, and the master's
            files += ["tcluster/agent/main.py", "tcluster/cli/main.py", "tcluster/cli/sim.py",
                      "tcluster/master/app/main.py", "tcluster/scheduler/mch.py", "tcluster/sim/engine.py"]
        (info / "RECORD").write_text("".join(f"{f},sha256=x,1\n" for f in files))
        for f in files:
            (site / f).parent.mkdir(parents=True, exist_ok=True)
            (site / f).touch()


def test_the_split_moves_what_only_the_master_needs(tmp_path: Path) -> None:
    build = builder()
    root, master = tmp_path / "tcluster", tmp_path / "tcluster-master"
    site = root / "opt" / "tcluster" / "venv" / "lib" / "python3.11" / "site-packages"
    fake_site(site)
    for rel in ("opt/tcluster/bin/tcl", "opt/tcluster/bin/tcl-master", "opt/tcluster/bin/tcl-gm",
                "lib/systemd/system/tcl-agent.service", "lib/systemd/system/tcl-master.service",
                "etc/tcluster/agent.toml", "etc/tcluster/master.toml", "etc/tcluster/gm.toml",
                "usr/share/man/man8/tcl-master.8.gz", "usr/share/man/man1/tcl.1.gz",
                "usr/share/bash-completion/completions/tcl-gm", "usr/share/zsh/vendor-completions/_tcl-master",
                "usr/share/tcluster/dashboards/prometheus/tcluster-alerts.yml", "usr/lib/sysusers.d/tcluster-master.conf",
                "usr/share/doc/tcluster/copyright", "usr/share/doc/tcluster-master/copyright"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    build.split(root, master)

    def files(tree: Path) -> set[str]:
        return {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()}
    sp = str(site.relative_to(root))
    assert {f"{sp}/numpy/__init__.py", f"{sp}/numpy.libs/libopenblas.so", f"{sp}/aiohttp/__init__.py",
            f"{sp}/yarl/__init__.py", f"{sp}/numpy-1.0.dist-info/RECORD"} <= files(master)
    kept = files(root)
    assert {f"{sp}/idna/__init__.py", f"{sp}/grpcio/__init__.py", f"{sp}/docker/__init__.py", f"{sp}/pytest/__init__.py",
            f"{sp}/tcluster/__init__.py", "opt/tcluster/bin/tcl", "usr/share/man/man1/tcl.1.gz",
            "lib/systemd/system/tcl-agent.service", "etc/tcluster/agent.toml", "usr/share/doc/tcluster/copyright"} <= kept
    assert not any(re.search(r"numpy|aiohttp|yarl|tcl-master|tcl-gm|master\.toml|gm\.toml|sysusers|dashboards", f)
                   for f in kept), sorted(kept)
    assert not (site / "numpy").exists()         # emptied directories go too: dpkg would list them as tcluster's
    assert (master / "opt/tcluster/requirements-master.txt").read_text() == "aiohttp==1.0\nnumpy==1.0\nyarl==1.0\n"
    assert {f"{sp}/tcluster/master/app/main.py", f"{sp}/tcluster/scheduler/mch.py", f"{sp}/tcluster/sim/engine.py"} <= files(master)
    assert {f"{sp}/tcluster/agent/main.py", f"{sp}/tcluster/cli/main.py", f"{sp}/tcluster/cli/sim.py"} <= kept
    assert not any(f.startswith(f"{sp}/tcluster/") for f in files(master) - {f"{sp}/tcluster/master/app/main.py",
                                                                             f"{sp}/tcluster/scheduler/mch.py",
                                                                             f"{sp}/tcluster/sim/engine.py"})
    # tcluster-master's prerm removes the bytecode of its own directories only: never all of
    # tcluster/, whose agent and tcl modules are the other package's.
    tops = sorted(p.name for p in (master / sp).iterdir() if p.name != "tcluster")
    assert "numpy" in tops and "yarl-1.0.dist-info" in tops
    assert build.owned_dirs(master / sp) == tops + ["tcluster/master", "tcluster/scheduler", "tcluster/sim"]
    assert "idna==1.0" in (root / "opt/tcluster/requirements.txt").read_text()


def test_each_postinst_compiles_its_own_sources_and_only_the_numeric_modules_the_master_imports(
        tmp_path: Path) -> None:
    build = builder()
    site = tmp_path / "opt" / "tcluster" / "venv" / "lib" / "python3.11" / "site-packages"
    sources = {"numpy/__init__.py": "from numpy import core", "numpy/core.py": "", "numpy/unused.py": "",
               "scipy/__init__.py": "", "scipy/sparse/__init__.py": "", "scipy/optimize/__init__.py": "",
               "scipy/special.py": "", "scipy/tests/test_x.py": "", "aiohttp/__init__.py": "", "aiohttp/web.py": "",
               "aiohttp/tests/test_y.py": "", "numpy.libs/libopenblas.so": ""}
    for rel, text in sources.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    listed = build.bytecode_list(tmp_path, "tcluster-master").splitlines()
    prefix = "/opt/tcluster/venv/lib/python3.11/site-packages/"
    assert all(line.startswith(prefix) for line in listed), listed
    expected = {"aiohttp/__init__.py", "aiohttp/web.py", "numpy/__init__.py", "scipy/__init__.py",
                "scipy/sparse/__init__.py", "scipy/optimize/__init__.py"}
    if build.TARGET_PY == f"{sys.version_info.major}.{sys.version_info.minor}":
        expected.add("numpy/core.py")        # imported by numpy's __init__: found by importing
    else:
        expected |= {"numpy/core.py", "numpy/unused.py", "scipy/special.py"}
    assert {line.removeprefix(prefix) for line in listed} == expected


def test_control_files_name_their_dependencies_and_the_version() -> None:
    base = (DEB / "tcluster.control.in").read_text()
    master = (DEB / "tcluster-master.control.in").read_text()
    assert re.search(r"(?m)^Package: tcluster$", base) and re.search(r"(?m)^Package: tcluster-master$", master)
    assert "tcluster (= @VERSION@)" in master       # one venv: the two must be the same build
    assert re.search(r"(?m)^Depends: .*\bopenssl$", base)   # a node makes its key with it (nodekeys.py)
    for text in (base, master):
        assert "@localhost" not in text and re.search(r"(?m)^Maintainer: .+ <[^@\s]+@[^@\s]+\.[a-z]+>$", text)
        assert re.search(r"(?m)^Installed-Size: @SIZE_KB@$", text)


@pytest.mark.parametrize("name", UNITS)
def test_no_unit_restarts_on_a_config_error(name: str) -> None:
    service = unit(name)
    assert service["RestartPreventExitStatus"] == ["2"] and service["Restart"] == ["on-failure"]


@pytest.mark.parametrize("name", ["tcl-master.service", "tcl-gm.service"])
def test_the_master_and_gm_run_unprivileged_and_confined(name: str) -> None:
    service = unit(name)
    assert service["User"] == ["tcluster"] and service["CapabilityBoundingSet"] == [""]
    for key, value in (("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateDevices", "yes"),
                       ("NoNewPrivileges", "yes"), ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                       ("ProtectKernelLogs", "yes"), ("ProtectControlGroups", "yes")):
        assert service[key] == [value], key
    assert service["SystemCallFilter"][0] == "@system-service"
    assert service["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    state = service["StateDirectory"][0]
    assert service["ExecStartPre"] == [f"+/bin/chown -R tcluster:tcluster /var/lib/{state}"]
    sysusers = (DEB / "tcluster-master.sysusers").read_text()
    assert re.search(r"(?m)^u tcluster - ", sysusers)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", ["tcl-master.service", "tcl-gm.service"])
def test_systemd_analyze_rates_the_master_and_gm_ok(name: str) -> None:
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(REPO / "systemd" / name)],
                          capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", done.stdout)
    if match is None and "offline" in done.stderr:
        pytest.skip(f"this systemd-analyze has no --offline: {done.stderr.strip()[:200]}")
    assert match, (done.stdout[-2000:], done.stderr[-2000:])
    assert float(match.group(1)) <= 3.0, done.stdout


def test_the_agent_unit_keeps_what_its_tasks_need() -> None:
    """The agent's tasks inherit its unit's sandbox: no mount namespace (the tasks' /run/netns
    mounts must outlive an agent restart, which gets a new one), no device allow-list (GPUs),
    no syscall allow-list, no NoNewPrivileges (setuid programs in tasks)."""
    service = unit("tcl-agent.service")
    for key in ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "ProtectKernelModules",
                "ProtectKernelLogs", "ProtectKernelTunables", "ProtectControlGroups", "ProtectClock", "ProtectHostname",
                "ProtectProc", "ReadOnlyPaths", "InaccessiblePaths", "NoNewPrivileges", "DeviceAllow", "User",
                "RestrictNamespaces", "MemoryDenyWriteExecute"):
        assert key not in service, key
    assert all(rule.startswith("~") for rule in service["SystemCallFilter"])
    assert service["CapabilityBoundingSet"][0].startswith("~") and "CAP_SYS_MODULE" in service["CapabilityBoundingSet"][0]
    assert service["LockPersonality"] == ["yes"] and service["Delegate"] == ["yes"]


@pytest.mark.parametrize("script", sorted(p.name for p in DEB.glob("*.p*")))
def test_maintainer_scripts_use_the_debhelper_helpers(script: str) -> None:
    text = (DEB / script).read_text()
    assert subprocess.run(["sh", "-n", str(DEB / script)]).returncode == 0
    calls = [line.strip() for line in text.splitlines() if re.search(r"\bsystemctl\b", line) and not line.strip().startswith("#")]
    assert all("systemctl --system daemon-reload" in line for line in calls), calls   # the rest via deb-systemd-*
    assert "rm -rf /opt" not in text                                                # dpkg removes its own files
    for line in (line for line in text.splitlines() if "compileall" in line and not line.strip().startswith("#")):
        # the package's own list (bytecode_list), never a walk of the venv: all of scipy would
        # take minutes in tests/vm, and the other package's files are its postinst's
        assert "-a \"$1\" \"$VENV/bin/python\" -m compileall -q" in line, line
    if script.endswith(".postinst"):
        assert f"compile_listed /opt/tcluster/{script.removesuffix('.postinst')}.pyfiles" in text
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", "-s", "sh", str(DEB / script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(("missing", "argv"), [
    ("numpy", ["sim", "SCENARIO"]),                 # a node without numpy and scipy
    ("tcluster.sim", ["sim", "SCENARIO"]),          # nor tcluster's own master-side subpackages
    ("tcluster.scheduler", ["pack", "--generate", "10"]),
    ("tcluster.master", ["dev"]),
    ("tcluster.master", ["completion", "bash", "tcl-master"]),
])
def test_a_command_of_the_master_package_says_which_package_to_install(missing: str, argv: list[str]) -> None:
    """On a node with tcluster only, `tcl sim` (pack, dev) names the package instead of a traceback."""
    from tcluster.cli.main import MASTER_PACKAGE_LIBRARIES
    assert set(MASTER_PACKAGE_LIBRARIES) == set(IMPORT_NAMES.values())
    probe = """
import json, sys
missing = sys.argv[1]
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name == missing or name.startswith(missing + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from tcluster.cli.main import main
sys.exit(main(json.loads(sys.argv[2])))
"""
    argv = [str(REPO / "examples" / "backfill-gangs.yaml") if a == "SCENARIO" else a for a in argv]
    done = subprocess.run([sys.executable, "-c", probe, missing, json.dumps(argv)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"tcl {argv[0]} needs {missing}, which this install lacks" in done.stderr, done.stderr
    assert "tcluster-master" in done.stderr


def test_a_module_missing_inside_an_installed_part_is_a_bug_not_a_package_to_install() -> None:
    """tcluster.sim is there but one of its modules is not (a broken install, a bad import):
    the traceback shows, instead of advice to install what is installed."""
    probe = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "tcluster.sim.engine":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
from tcluster.cli.main import main
sys.exit(main(["sim", sys.argv[1]]))
"""
    done = subprocess.run([sys.executable, "-c", probe, str(REPO / "examples" / "backfill-gangs.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" in done.stderr and "tcluster.sim.engine" in done.stderr, done.stderr
    assert "tcluster-master" not in done.stderr


def test_installed_size_counts_the_bytecode_compileall_writes(tmp_path: Path) -> None:
    """bytecode_bytes is the size of the .pyc py_compile writes for the same source."""
    import py_compile
    build = builder()
    if build.TARGET_PY != f"{sys.version_info.major}.{sys.version_info.minor}":
        pytest.skip(f"this Python is not the packages' target ({build.TARGET_PY}): the size is estimated")
    sources = [REPO / "scheduler" / "mch.py", REPO / "cli" / "main.py", REPO / "tcluster" / "version.py"]
    for source in sources:
        copy = tmp_path / source.name
        shutil.copy2(source, copy)
        written = Path(py_compile.compile(str(copy), cfile=str(tmp_path / f"{source.stem}.pyc"), dfile="/opt/x.py"))
        assert build.bytecode_bytes(copy, "/opt/x.py") == written.stat().st_size, source
    root = tmp_path / "root"
    listed = root / "opt" / "tcluster" / "tcluster.pyfiles"
    listed.parent.mkdir(parents=True)
    (root / "opt" / "a.py").write_text("x = 1\n" * 2000)
    listed.write_text("/opt/a.py\n")
    files = (root / "opt" / "a.py").stat().st_size + listed.stat().st_size
    assert build.installed_kb(root, "tcluster") == (files + build.bytecode_bytes(root / "opt" / "a.py", "/opt/a.py")) // 1024
