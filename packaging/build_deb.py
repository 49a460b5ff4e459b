"""`make deb`: build two packages with dpkg-deb from a clean copy of the working tree:

- dist/tcluster_<version>_amd64.deb: `tcl` and `tcl-agent` (what every node needs),
- dist/tcluster-master_<version>_amd64.deb: `tcl-master` and `tcl-gm`, their units and
  config files, and the libraries only they import (numpy, scipy for LoTES; aiohttp,
  prometheus_client, orjson for the dashboard and /metrics; aetcd for --store etcd).
  Depends on tcluster of the same version; creates the `tcluster` system user its daemons
  run as.

Both fill one venv for the target's own interpreter, never the build machine's:
/opt/tcluster/venv/bin/python links to /usr/bin/python<TARGET_PY> (Depends: python3.11 on
Debian 12), and its site-packages holds tcluster and every dependency unpacked from wheels
chosen for that Python and platform (`pip install --target --python-version --platform`,
as tests/vm/images.py does for the guest), whatever interpreter runs this script. So
nothing is fetched or built at install time and dpkg owns every file (remove and purge
leave nothing behind); the split is by distribution (each wheel's RECORD): a file belongs
to tcluster-master when its distribution is needed only by MASTER_ONLY. postinst only
compiles the bytecode with the target's python. Versions are pinned to the build venv's
where it has them (the versions the tests ran with) and listed in
/opt/tcluster/requirements{,-master}.txt. The tcluster wheel has the task supervisor
compiled in statically (setup.py). /opt is a deliberate choice (a self-contained venv, as
dh-virtualenv makes): lintian's dir-or-file-in-opt tag is overridden, with this reason.

Usage: python packaging/build_deb.py [--version 0.1.1] [--revision 1] [--out dist]
(`make deb VERSION=0.1.1`); the version defaults to pyproject.toml's. Prints both paths,
tcluster's first."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import marshal
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEB = Path(__file__).resolve().parent / "deb"
VERSION_PY = Path(__file__).resolve().parents[1] / "tcluster" / "version.py"   # stdlib only: loaded by path
TARGET_PY = os.environ.get("TCL_DEB_PYTHON", "3.11")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64",
             "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64", "any")
# What the build venv has that the package must not pin (tests, tools, the project itself).
NOT_PINNED = {"tcluster", "pip", "setuptools", "wheel"}
PRUNED_SUFFIXES = {".pyi", ".pxd", ".pyx", ".h", ".hpp"}
# The packages, tcluster's first (it holds what is not tcluster-master's).
PACKAGES = ("tcluster", "tcluster-master")
MASTER_PROGRAMS = ("tcl-master", "tcl-gm")
# Distributions only the master and the GM import (tests/unit/test_package_split.py checks
# that the agent and tcl import none of them): they and what only they need go to
# tcluster-master. cryptography (with cffi and pycparser, 12.9 MB) signs; a node only reads
# certificates (tcluster/security/certs.py) and makes its key with openssl (nodekeys.py).
MASTER_ONLY = {"numpy", "scipy", "aiohttp", "prometheus-client", "orjson", "aetcd", "cryptography"}
# tcluster's own subpackages that only tcl-master and tcl-gm load (and tcl sim, pack and dev,
# which need numpy, so tcluster-master, anyway): 1.5 MB of sources and 2.5 MB of bytecode
# that no node runs. The same test checks that the agent and tcl load none of them.
MASTER_MODULES = ("master", "gm", "scheduler", "sim", "pack", "etcd", "federation")
ENTRY_POINTS = {"tcl": "tcluster.cli.main", "tcl-master": "tcluster.master.app.main", "tcl-agent": "tcluster.agent.main",
                "tcl-gm": "tcluster.gm.main"}
# Where Debian's bash-completion and zsh look for a package's completion functions.
BASH_COMPLETION = Path("usr/share/bash-completion/completions/tcl")
ZSH_COMPLETION = Path("usr/share/zsh/vendor-completions/_tcl")


def run(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"build_deb: {' '.join(args)[:200]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                 f"{done.stderr[-4000:]}")
    return done.stdout


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def stage_source(dest: Path, version: str) -> None:
    """The tracked and untracked-but-not-ignored files (a clean checkout's view), version stamped."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    pyproject = dest / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', pyproject.read_text(), count=1))
    init = dest / "tcluster" / "__init__.py"
    init.write_text(re.sub(r'(?m)^__version__ = ".*"$', f'__version__ = "{version}"', init.read_text(), count=1))
    stamp_commit(dest / "tcluster")


def stamp_commit(package_dir: Path) -> None:
    """tcluster/COMMIT: the staged copy has no .git, so the commit is written in for `--version`."""
    spec = importlib.util.spec_from_file_location("tcl_version", VERSION_PY)
    assert spec is not None and spec.loader is not None
    version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(version)
    (package_dir / version.COMMIT_FILE).write_text((version.git_commit(REPO) or version.UNKNOWN) + "\n")


def build_wheel(source: Path, wheels: Path) -> Path:
    """The tcluster wheel, with the task supervisor inside."""
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source))
    (wheel,) = wheels.glob("tcluster-*.whl")
    return wheel


def install_for_target(wheel: Path, site: Path) -> None:
    """tcluster and its dependencies unpacked into `site` for the target's Python: wheels only,
    no bytecode (the target's python compiles it), no scripts (bin/ wrappers call main())."""
    constraints = wheel.parent / "constraints.txt"
    constraints.write_text("\n".join(pins_of_build_venv()) + "\n")
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    run(sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(site), "--only-binary=:all:",
        "--python-version", TARGET_PY, "--implementation", "cp", "--abi", f"cp{TARGET_PY.replace('.', '')}",
        *platforms, "-c", str(constraints), str(wheel))
    shutil.rmtree(site / "bin", ignore_errors=True)
    for stray in site.glob("*.dist-info/direct_url.json"):    # names the build machine's temporary wheel path
        stray.unlink()
    prune(site)
    tidy(site)


def tidy(site: Path) -> None:
    """As dh_fixperms and dh_strip would: the dependencies' files not executable (nothing in
    site-packages is run directly; bin/ is gone); ours keep their modes (the task supervisor
    must stay executable). Stripped: the supervisor, a static binary of ours, and the wheels'
    shared objects that auditwheel did not edit (cryptography's and PyYAML's shed 5 MB from
    every node); the edited ones (an RPATH to their bundled libraries) are not: patchelf's
    edits do not survive `strip` (numpy's OpenBLAS failed to load: "ELF load command
    address/offset not page-aligned", tests/vm)."""
    ours = site / "tcluster"
    strip, readelf = shutil.which("strip"), shutil.which("readelf")
    for shim in sorted(ours.rglob("tcl-shim-*")) if strip else []:
        run(str(strip), "--strip-unneeded", str(shim))
    for path in site.rglob("*"):
        if path.is_file() and not path.is_symlink() and ours not in path.parents:
            path.chmod(0o644)
            if strip and readelf and ".so" in path.suffixes and not edited_by_auditwheel(readelf, path):
                run(strip, "--strip-unneeded", str(path))


def edited_by_auditwheel(readelf: str, library: Path) -> bool:
    """auditwheel grafts a wheel's external libraries in with patchelf, and gives each object
    that loads them an RPATH (or RUNPATH) to find them."""
    return re.search(r"\((RPATH|RUNPATH)\)", run(readelf, "-d", str(library))) is not None


def prune(site: Path) -> None:
    """The dependencies' own test suites, type stubs and C headers: never imported at run
    time, and about 40% of the files dpkg would unpack (and postinst compile) on each node."""
    ours = site / "tcluster"
    for tests in [p for p in site.rglob("tests") if p.is_dir() and ours not in p.parents]:
        shutil.rmtree(tests, ignore_errors=True)
    for path in site.rglob("*"):
        if path.suffix in PRUNED_SUFFIXES and path.is_file() and ours not in path.parents:
            path.unlink()


def pins_of_build_venv() -> list[str]:
    frozen = run(sys.executable, "-m", "pip", "freeze", "--exclude-editable")
    return sorted(line for line in frozen.splitlines()
                  if "==" in line and line.split("==")[0].lower() not in NOT_PINNED)


def requirements(site: Path) -> str:
    """name==version of every distribution in the venv: what the package pins."""
    pins = []
    for info in sorted(site.glob("*.dist-info"), key=lambda p: p.name.lower()):
        name, version = info.name.removesuffix(".dist-info").split("-")[:2]
        pins.append(f"{name}=={version}")
    return "\n".join(pins) + "\n"


def wrapper(module: str) -> str:
    """/opt/tcluster/bin/X: the venv's python, whatever pip would have written as a shebang."""
    return f"#!/opt/tcluster/venv/bin/python\nimport sys\nfrom {module} import main\nsys.exit(main())\n"


def venv(opt: Path, wheel: Path) -> Path:
    """A venv as `python3 -m venv --without-pip` would make it on the target; returns its site-packages."""
    root = opt / "venv"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {TARGET_PY}\n")
    for name in ("python", "python3", f"python{TARGET_PY}"):
        (root / "bin" / name).symlink_to(f"/usr/bin/python{TARGET_PY}")
    site = root / "lib" / f"python{TARGET_PY}" / "site-packages"
    install_for_target(wheel, site)
    return site


def lay_out(root: Path, wheel: Path, version: str) -> None:
    """Everything both packages install, in one tree; split() then moves tcluster-master's part out."""
    opt = root / "opt" / "tcluster"
    venv(opt, wheel)
    (opt / "VERSION").write_text(version + "\n")
    shutil.copy2(REPO / "README.md", opt / "README.md")
    for page in sorted((REPO / "docs").rglob("*.md")):      # the README and the man pages link them
        target = opt / "docs" / page.relative_to(REPO / "docs")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(page, target)
    shutil.copy2(REPO / "install.sh", opt / "install.sh")
    (opt / "install.sh").chmod(0o755)
    (opt / "bin").mkdir()
    (root / "usr" / "bin").mkdir(parents=True)
    for name, module in ENTRY_POINTS.items():
        (opt / "bin" / name).write_text(wrapper(module))
        (opt / "bin" / name).chmod(0o755)
        (root / "usr" / "bin" / name).symlink_to(f"/opt/tcluster/bin/{name}")
    units = root / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in ("tcl-agent.service", "tcl-master.service", "tcl-gm.service"):
        shutil.copy2(REPO / "systemd" / unit, units / unit)
    etc = root / "etc" / "tcluster"
    etc.mkdir(parents=True)
    for conf in ("agent.toml", "master.toml", "gm.toml"):
        shutil.copy2(REPO / "systemd" / conf, etc / conf)
    sysusers = root / "usr" / "lib" / "sysusers.d"
    sysusers.mkdir(parents=True)
    shutil.copy2(DEB / "tcluster-master.sysusers", sysusers / "tcluster-master.conf")
    share = root / "usr" / "share" / "tcluster"
    shutil.copytree(REPO / "dashboards", share / "dashboards")   # Grafana dashboard, Prometheus alert rules
    docs(root, version.rsplit("-", 1)[0])
    for package in PACKAGES:
        debian_docs(root, package, version)


def debian_docs(root: Path, package: str, version: str) -> None:
    """/usr/share/doc/<package>/: the DEP-5 copyright and the Debian changelog (gzipped)."""
    doc = root / "usr" / "share" / "doc" / package
    doc.mkdir(parents=True)
    shutil.copy2(DEB / "copyright", doc / "copyright")
    entry = ((DEB / "changelog.in").read_text().replace("@PACKAGE@", package).replace("@VERSION@", version)
             .replace("@DATE@", "Sun, 29 Nov 2026 00:00:00 +0000"))
    with gzip.GzipFile(doc / "changelog.Debian.gz", "wb", compresslevel=9, mtime=0) as out:
        out.write(entry.encode())


def distributions(site: Path) -> dict[str, tuple[set[str], set[Path]]]:
    """Each installed distribution (normalised name): what it requires (names, markers and
    extras left out: over-including only moves a library into tcluster) and the files its
    RECORD lists, relative to site."""
    found: dict[str, tuple[set[str], set[Path]]] = {}
    for info in site.glob("*.dist-info"):
        metadata = (info / "METADATA").read_text(errors="replace")
        name = normalise(re.search(r"(?m)^Name: *(\S+)", metadata).group(1))  # type: ignore[union-attr]
        needs = {normalise(re.split(r"[\s;<>=!~\[(]", line.split(":", 1)[1].strip())[0])
                 for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
        files = {Path(row.split(",", 1)[0]) for row in (info / "RECORD").read_text().splitlines() if row}
        listed = {f.relative_to(site) for f in info.rglob("*") if f.is_file()}   # RECORD itself, INSTALLER ...
        found[name] = (needs, {f for f in files if ".." not in f.parts} | listed)
    return found


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def master_only_files(site: Path) -> set[Path]:
    """The files (relative to site) of the distributions only tcl-master and tcl-gm need:
    MASTER_ONLY and what they require that nothing else tcluster requires does."""
    dists = distributions(site)
    roots = dists["tcluster"][0]

    def closure(start: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = [n for n in start if n in dists]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += [n for n in dists[name][0] if n in dists]
        return seen
    master = closure(MASTER_ONLY) - closure(roots - MASTER_ONLY)
    return {f for name in master for f in dists[name][1]}


def is_master_path(rel: Path) -> bool:
    """Outside the venv: tcl-master's and tcl-gm's programs, units, config, man pages and
    completion, the sysusers file and the dashboards."""
    text = str(rel)
    return (any(program in rel.name for program in MASTER_PROGRAMS) or rel.name in ("master.toml", "gm.toml")
            or text.startswith(("usr/lib/sysusers.d/", "usr/share/tcluster/", "usr/share/doc/tcluster-master/")))


def is_master_module(rel: Path) -> bool:
    """A file (relative to site) of one of tcluster's MASTER_MODULES."""
    return len(rel.parts) > 2 and rel.parts[0] == "tcluster" and rel.parts[1] in MASTER_MODULES


def split(root: Path, master_root: Path) -> None:
    """Move tcluster-master's files from root into master_root, at the same paths."""
    site = next((root / "opt" / "tcluster" / "venv" / "lib").glob("python*/site-packages"))
    moved = {site.relative_to(root) / f for f in master_only_files(site)}
    moved |= {p.relative_to(root) for p in (site / "tcluster").rglob("*")
              if p.is_file() and is_master_module(p.relative_to(site))}
    moved |= {p.relative_to(root) for p in root.rglob("*")
              if (p.is_file() or p.is_symlink()) and is_master_path(p.relative_to(root)) and "venv" not in p.parts}
    for rel in sorted(moved):
        source = root / rel
        if source.is_file() or source.is_symlink():
            (master_root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, master_root / rel)
    for directory in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(directory.iterdir()) and directory.relative_to(root).parts[:1] != ("DEBIAN",):
            directory.rmdir()          # emptied by the move: the package that has files there owns it
    master_site = master_root / site.relative_to(root)
    (master_root / "opt" / "tcluster" / "requirements-master.txt").write_text(requirements(master_site))
    (root / "opt" / "tcluster" / "requirements.txt").write_text(requirements(site))


def docs(root: Path, version: str) -> None:
    """Man pages (gzipped, as Debian wants them) and bash/zsh completion, generated from the
    parsers by the build venv's tcluster (the same tree the wheel was built from)."""
    with tempfile.TemporaryDirectory(prefix="tcl-man-") as pages:
        run(sys.executable, "-m", "tcluster.cli.manpages", pages, version)
        for page in sorted(Path(pages).iterdir()):
            section = root / "usr" / "share" / "man" / f"man{page.suffix[1:]}"
            section.mkdir(parents=True, exist_ok=True)
            with gzip.GzipFile(section / f"{page.name}.gz", "wb", compresslevel=9, mtime=0) as out:
                out.write(page.read_bytes())
    for program in ENTRY_POINTS:            # tcl and each daemon
        for shell, path in (("bash", BASH_COMPLETION), ("zsh", ZSH_COMPLETION)):
            path = path.with_name(path.name.replace("tcl", program))
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(run(sys.executable, "-m", "tcluster.cli.completion", shell, program))


def installed_kb(root: Path, package: str) -> int:
    """The files plus the bytecode postinst writes for the sources it lists (bytecode_list)."""
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    listed = (root / "opt" / "tcluster" / f"{package}.pyfiles").read_text().splitlines()
    return (size + sum(bytecode_bytes(root / line.lstrip("/"), line) for line in listed)) // 1024


def bytecode_bytes(source: Path, installed: str) -> int:
    """The size of the .pyc compileall writes for `source`: a 16-byte header and the
    marshalled code, when this is the target's Python; else a third more than the source
    (what CPython 3.11 writes for the node venv's sources: 13.3 MB for 10.1 MB of them)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" != TARGET_PY:
        return source.stat().st_size * 4 // 3
    try:
        return 16 + len(marshal.dumps(compile(source.read_bytes(), installed, "exec", dont_inherit=True)))
    except (SyntaxError, ValueError):   # compileall skips it too
        return 0


# What tcl-master imports of numpy and scipy (LoTES): the only modules of theirs compiled.
NUMERIC_IMPORTS = "import numpy, scipy.sparse, scipy.optimize"
NUMERIC_TOPS = ("numpy", "scipy")


def numeric_modules(site: Path) -> set[Path]:
    """The numpy and scipy sources (relative to site) that NUMERIC_IMPORTS loads, found by
    importing them from `site` with this interpreter; every one of their sources when this
    is not the target's Python (the target's binary wheels would not load here)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == TARGET_PY:
        probe = (f"import sys; sys.path.insert(0, {str(site)!r}); {NUMERIC_IMPORTS}\n"
                 "for m in list(sys.modules.values()): print(getattr(m, '__file__', None) or '')")
        loaded = {Path(line) for line in run(sys.executable, "-S", "-c", probe).splitlines() if line.endswith(".py")}
        return {f.relative_to(site) for f in loaded if f.is_relative_to(site)}
    return {f.relative_to(site) for top in NUMERIC_TOPS for f in (site / top).rglob("*.py")}


def bytecode_list(root: Path, package: str) -> str:
    """The sources this package's postinst compiles, one absolute path a line: all of its own
    but tests, and of numpy and scipy only what the master imports (numeric_modules)."""
    site = next((root / "opt" / "tcluster" / "venv" / "lib").glob("python*/site-packages"))
    sources = {f.relative_to(site) for f in site.rglob("*.py") if not {"test", "tests"} & set(f.parts)}
    if any((site / top).is_dir() for top in NUMERIC_TOPS):
        sources = {f for f in sources if f.parts[0] not in NUMERIC_TOPS} | numeric_modules(site)
    return "".join(f"/{(site / f).relative_to(root)}\n" for f in sorted(sources))


def control(root: Path, package: str, version: str) -> None:
    """DEBIAN/: control (from <package>.control.in), conffiles, the maintainer scripts, and
    the lintian override for the /opt choice."""
    meta = root / "DEBIAN"
    meta.mkdir()
    (root / "opt" / "tcluster" / f"{package}.pyfiles").write_text(bytecode_list(root, package))
    text = ((DEB / f"{package}.control.in").read_text().replace("@VERSION@", version).replace("@PY@", TARGET_PY)
            .replace("@SIZE_KB@", str(installed_kb(root, package))))
    (meta / "control").write_text(text)
    conffiles = sorted("/" + str(p.relative_to(root)) for p in (root / "etc").rglob("*") if p.is_file())
    (meta / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    site = next((root / "opt" / "tcluster" / "venv" / "lib").glob("python*/site-packages"))
    tops = " ".join(owned_dirs(site)) if package != "tcluster" else ""
    for script in ("postinst", "prerm", "postrm"):
        (meta / script).write_text((DEB / f"{package}.{script}").read_text().replace("@SITE_DIRS@", tops)
                                   .replace("@PY@", TARGET_PY))
        (meta / script).chmod(0o755)
    overrides = root / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    (overrides / package).write_text((DEB / "lintian-overrides").read_text().replace("@PACKAGE@", package))


def owned_dirs(site: Path) -> list[str]:
    """tcluster-master's directories (relative to site) whose bytecode its prerm removes: its
    distributions' top directories and tcluster's MASTER_MODULES, never tcluster itself,
    whose other modules (and their bytecode) are the tcluster package's."""
    tops = sorted(p.name for p in site.iterdir() if p.is_dir() and p.name != "tcluster")
    return tops + [f"tcluster/{m}" for m in MASTER_MODULES if (site / "tcluster" / m).is_dir()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="build_deb", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", default="", help="upstream version (default: pyproject.toml's)")
    p.add_argument("--revision", default="1", help="Debian revision (default %(default)s)")
    p.add_argument("--out", type=Path, default=REPO / "dist")
    args = p.parse_args(argv)
    version = args.version or project_version()
    deb_version = f"{version}-{args.revision}"
    args.out.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory(prefix="tcl-deb-") as tmp_name:
        tmp = Path(tmp_name)
        stage_source(tmp / "src", version)
        wheel = build_wheel(tmp / "src", tmp / "wheels")
        roots = {package: tmp / package for package in PACKAGES}
        lay_out(roots["tcluster"], wheel, deb_version)
        split(roots["tcluster"], roots["tcluster-master"])
        for package, root in roots.items():
            control(root, package, deb_version)
            out = args.out / f"{package}_{deb_version}_amd64.deb"
            # gzip: a slow target (tests/vm's emulated guest) unpacks it several times faster than xz.
            run("dpkg-deb", "--root-owner-group", "-Zgzip", "-z6", "--build", str(root), str(out))
            built.append(out)
    print("\n".join(map(str, built)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
