"""Build (once) and cache the VM images the cgroup v2 / systemd tests boot under qemu.

Everything lives outside the repo in a cache directory ($TCL_VM_CACHE, default
/var/cache/tcluster-vm), each artefact in a directory named by a hash of its inputs, so a
second run on the same machine reuses it and a changed input rebuilds only what depends
on it. Recipes are the measured ones from ../shared/HOST.md:

- kernel: Debian's linux-image package (the version linux-image-amd64 names), unpacked
  with dpkg-deb; the uncompressed ELF is cut out of vmlinuz (boots directly, ~6 s faster).
- initramfs: busybox-static, the virtio/ext4/9p modules, an init that switch_roots.
- net modules: the kernel's networking modules the task-network tests need (veth, bridge,
  HTB, nf_tables and NAT, with every module they depend on), laid out as
  /lib/modules/<version> for the rootfs, where the guest's own depmod (run on the host with
  -b) indexes them, so `modprobe` and the kernel's module autoloading work in the guest.
- rootfs: debootstrap minbase + systemd + python3, the guest runner unit, the net modules
  (loaded at boot by systemd-modules-load), and the project's Python dependencies
  installed for the guest's interpreter from PyPI wheels (pip --target on the host, so
  nothing runs inside a chroot).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from packaging.requirements import Requirement

from tests.vm import entrypoints

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
GUEST = HERE / "guest"
CACHE = Path(os.environ.get("TCL_VM_CACHE", "/var/cache/tcluster-vm"))
SUITE = "bookworm"
GUEST_PY = "3.11"
# Room for the guest's Python deps (~450 MB) plus what the system tests write there (the
# Figure 4 swap file, the log-cap test's files, pytest's temporary directories).
ROOTFS_SIZE = "3072M"
MODULES = ("virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk "
           "crc16 crc32c_generic jbd2 mbcache ext4 netfs fscache 9pnet 9pnet_virtio 9p").split()
PACKAGES = "systemd,systemd-sysv,python3,dbus,procps,kmod,iperf3,nftables,openssl"
# Task networks in the guest: these trees of the kernel package (and whatever their modules
# depend on) go into the rootfs; NET_BOOT_MODULES are loaded at boot (the rest on demand).
NET_MODULE_TREES = ("net/netfilter", "net/sched", "net/bridge", "net/ipv4/netfilter", "net/ipv6/netfilter",
                    "net/802", "net/llc", "drivers/net/veth.ko")
NET_BOOT_MODULES = ("veth", "bridge", "sch_htb", "nf_tables", "nft_chain_nat", "nft_masq")
# What the guest needs to run the system tests (the project itself is shared read-only).
GUEST_DEPS = ("grpcio", "protobuf", "pydantic", "psutil", "PyYAML", "pytest", "hypothesis", "pyroute2", "docker")
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


@dataclass(frozen=True)
class Images:
    kernel: Path
    initrd: Path
    rootfs: Path


def _run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def _key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _publish(tmp: Path, final: Path) -> Path:
    """Atomic: a half-built artefact is never visible under its final name."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return final
    os.replace(tmp, final)
    return final


def kernel_package() -> str:
    """The versioned kernel package the linux-image-amd64 metapackage points at."""
    out = _run("apt-cache", "depends", "linux-image-amd64")
    match = re.search(r"Depends: (linux-image-[0-9][^\s]*-amd64)", out)
    if not match:
        raise RuntimeError(f"cannot find the kernel package in:\n{out}\n(run apt-get update first)")
    return match.group(1)


def _extract_vmlinux(vmlinuz: Path, out: Path) -> None:
    data = vmlinuz.read_bytes()
    start = data.find(b"\xfd7zXZ\x00")
    if start < 0:
        raise RuntimeError(f"no xz stream in {vmlinuz}")
    out.write_bytes(lzma.LZMADecompressor().decompress(data[start:]))


def _unpack_kernel(package: str, work: Path) -> Path:
    """The kernel package downloaded and unpacked under work/x; returns work/x."""
    _run("apt-get", "download", package, cwd=work, env=APT_ENV)
    deb = next(work.glob("*.deb"))
    _run("dpkg-deb", "-x", str(deb), str(work / "x"))
    return work / "x"


def _kernel_dir(package: str) -> Path:
    return CACHE / f"kernel-{package}"


def _net_modules_dir(package: str) -> Path:
    return CACHE / f"netmodules-{package}-{_key(*NET_MODULE_TREES)[:8]}"


def build_kernel(unpacked: Path | None = None) -> Path:
    """Directory with vmlinux and modules/<name>.ko. unpacked: the kernel package already
    unpacked (build_all downloads it once for this and build_net_modules)."""
    package = kernel_package()
    final = _kernel_dir(package)
    if (final / "vmlinux").exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".kernel-"))
    work = tmp / "pkg"
    work.mkdir()
    x = unpacked or _unpack_kernel(package, work)
    _extract_vmlinux(next((x / "boot").glob("vmlinuz-*")), tmp / "vmlinux")
    (tmp / "modules").mkdir()
    for name in MODULES:
        found = [p for p in (x / "lib" / "modules").rglob(f"{name}.ko*") if p.name.split(".ko")[0] == name]
        if not found:
            raise RuntimeError(f"module {name} not in {package}")
        data = found[0].read_bytes()
        (tmp / "modules" / f"{name}.ko").write_bytes(lzma.decompress(data) if found[0].name.endswith(".xz") else data)
    shutil.rmtree(work)
    return _publish(tmp, final)


def _module_name(path: Path) -> str:
    return path.name.split(".ko")[0].replace("-", "_")


def _depends(ko: Path) -> list[str]:
    """The `depends=` field of a module's .modinfo section (NUL-separated key=value)."""
    data = ko.read_bytes()
    if ko.name.endswith(".xz"):
        data = lzma.decompress(data)
    at = data.find(b"\0depends=")
    if at < 0:
        return []
    value = data[at + len(b"\0depends="):data.index(b"\0", at + 1)].decode()
    return [name.replace("-", "_") for name in value.split(",") if name]


def build_net_modules(unpacked: Path | None = None) -> Path:
    """Directory holding lib/modules/<version>/: NET_MODULE_TREES and the closure of their
    dependencies, plus the package's modules.order/modules.builtin* (depmod reads those)."""
    package = kernel_package()
    final = _net_modules_dir(package)
    if final.exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".netmodules-"))
    work = tmp / "pkg"
    work.mkdir()
    x = unpacked or _unpack_kernel(package, work)
    (version_dir,) = (x / "lib" / "modules").iterdir()
    kernel = version_dir / "kernel"
    every = {_module_name(p): p for p in kernel.rglob("*.ko*")}
    wanted = [p for tree in NET_MODULE_TREES for p in
              ([kernel / tree] if (kernel / tree).is_file() else sorted((kernel / tree).rglob("*.ko*")))]
    chosen: dict[str, Path] = {}
    todo = [_module_name(p) for p in wanted]
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        if name not in every:
            raise RuntimeError(f"module {name} (a dependency) not in {package}")
        chosen[name] = every[name]
        todo += _depends(every[name])
    out = tmp / "lib" / "modules" / version_dir.name
    for path in chosen.values():
        target = out / path.relative_to(version_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for meta in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (version_dir / meta).exists():
            shutil.copy2(version_dir / meta, out / meta)
    shutil.rmtree(work)
    return _publish(tmp, final)


def _install_modules(root: Path, net_modules: Path) -> None:
    """The net modules into the rootfs, indexed by the guest's own depmod (run here with
    -b, so nothing runs in a chroot), and loaded at boot by systemd-modules-load."""
    (version_dir,) = (net_modules / "lib" / "modules").iterdir()
    target = root / "lib" / "modules" / version_dir.name      # usr/lib/modules (merged /usr)
    shutil.copytree(version_dir, target)
    kmod = root / "usr" / "bin" / "kmod"
    done = subprocess.run(["depmod", "-b", str(root), version_dir.name], executable=str(kmod),
                          capture_output=True, text=True)
    if done.returncode != 0 or not (target / "modules.dep").exists():
        raise RuntimeError(f"depmod -b {root} {version_dir.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    (root / "etc" / "modules-load.d").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "modules-load.d" / "tcl-net.conf").write_text("\n".join(NET_BOOT_MODULES) + "\n")


def build_initrd(kernel_dir: Path) -> Path:
    busybox = Path("/bin/busybox")
    init = (GUEST / "init-switchroot").read_bytes()
    final = CACHE / f"initrd-{_key(kernel_dir.name, init, _run('busybox'))[:12]}.cpio.gz"
    if final.exists():
        return final
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp_name:
        root = Path(tmp_name) / "root"
        for d in ("bin", "proc", "sys", "dev", "newroot", "lib/modules"):
            (root / d).mkdir(parents=True)
        shutil.copy2(busybox, root / "bin" / "busybox")
        (root / "init").write_bytes(init)
        (root / "init").chmod(0o755)
        for ko in (kernel_dir / "modules").iterdir():
            shutil.copy2(ko, root / "lib" / "modules" / ko.name)
        files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
        cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=files,
                              capture_output=True, check=True).stdout
        tmp_out = Path(tmp_name) / "initrd.cpio.gz"
        subprocess.run(["gzip", "-1"], input=cpio, stdout=tmp_out.open("wb"), check=True)
        os.replace(tmp_out, final)
    return final


def _mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    text = sources.read_text() if sources.exists() else ""
    match = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M)
    return match.group(1) if match else "http://deb.debian.org/debian"


# What the guest runs: the package's own dependencies and the test runner's, nothing of the
# host's dev tools (mypy, grpcio-tools, selenium, matplotlib): a new dev tool neither grows
# nor rebuilds the cached rootfs.
GUEST_TEST_TOOLS = ("pytest", "hypothesis", "pytest-timeout")


def _guest_requirements() -> list[str]:
    """The project's dependencies and the guest's test tools with everything they require,
    each pinned to the version the host's venv has."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        roots = [*tomllib.load(f)["project"]["dependencies"], *GUEST_TEST_TOOLS]
    pinned: dict[str, str] = {}
    todo = list(roots)
    while todo:
        req = Requirement(todo.pop())
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        if key in pinned or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        dist = metadata.distribution(req.name)
        pinned[key] = f"{dist.metadata['Name']}=={dist.version}"
        todo.extend(dist.requires or [])
    return sorted(pinned.values())


def _install_guest_python(root: Path, requirements: list[str]) -> None:
    """A venv layout for the guest's /usr/bin/python3 with wheels for its version."""
    venv = root / "opt" / "tcl-venv"
    site = venv / "lib" / f"python{GUEST_PY}" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {GUEST_PY}\n")
    (venv / "bin" / "python").symlink_to(f"/usr/bin/python{GUEST_PY}")
    _run(os.sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "--only-binary=:all:",
         "--python-version", GUEST_PY, "--implementation", "cp", "--abi", f"cp{GUEST_PY.replace('.', '')}",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", "--platform", "any", *requirements)
    shutil.copy2(GUEST / "tcl_repo_finder.py", site / "tcl_repo_finder.py")
    (site / "tcl_repo_finder.pth").write_text("import tcl_repo_finder\n")
    entrypoints.write(REPO_ROOT / "pyproject.toml", venv / "bin")   # written again at each boot


def _configure_rootfs(root: Path) -> None:
    etc = root / "etc"
    for unit in ("serial-getty@ttyS0.service", "getty@tty1.service", "systemd-timesyncd.service",
                 "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_reap.service"):
        link = etc / "systemd" / "system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    shutil.copy2(GUEST / "guest-runner.service", etc / "systemd" / "system" / "guest-runner.service")
    wants = etc / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "guest-runner.service").symlink_to("/etc/systemd/system/guest-runner.service")
    (etc / "fstab").write_text((GUEST / "guest-fstab").read_text())
    (etc / "hostname").write_text("tclvm\n")
    for d in ("mnt/share", "mnt/repo"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc" / "machine-id").write_text("")


def build_rootfs(net_modules: Path, timings: dict[str, float] | None = None,
                 wait_net_modules: Callable[[], object] = lambda: None) -> Path:
    """net_modules: where build_net_modules puts them (its name is part of the key);
    wait_net_modules returns once they are there, so they can be built meanwhile."""
    requirements = _guest_requirements()
    inputs = [SUITE, PACKAGES, ROOTFS_SIZE, net_modules.name, *NET_BOOT_MODULES, *requirements] + [p.read_bytes().decode() for p in sorted(GUEST.iterdir()) if p.is_file()]
    final = CACHE / f"rootfs-{_key(*inputs)}.img"
    if final.exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".rootfs-") as tmp_name:
        root = Path(tmp_name) / "root"
        phases = {} if timings is None else timings
        started = time.monotonic()
        _run("debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(root), _mirror(), env=APT_ENV)
        shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        phases["rootfs_debootstrap"] = round(time.monotonic() - started, 1)
        _configure_rootfs(root)
        wait_net_modules()
        _install_modules(root, net_modules)
        started = time.monotonic()
        _install_guest_python(root, requirements)
        phases["rootfs_python_deps"] = round(time.monotonic() - started, 1)
        img = Path(tmp_name) / "rootfs.img"
        started = time.monotonic()
        _run("mkfs.ext4", "-q", "-F", "-L", "tclroot", "-d", str(root), str(img), ROOTFS_SIZE)
        phases["rootfs_mkfs"] = round(time.monotonic() - started, 1)
        os.replace(img, final)
    return final


def _kernel_side() -> Path:
    """The kernel and the net modules, from one download and unpacking of the package."""
    package = kernel_package()
    if (_kernel_dir(package) / "vmlinux").exists() and _net_modules_dir(package).exists():
        return build_kernel()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".kernel-pkg-") as work:
        unpacked = _unpack_kernel(package, Path(work))
        kernel_dir = build_kernel(unpacked)
        build_net_modules(unpacked)
    return kernel_dir


def build_all(timings: dict[str, float] | None = None) -> Images:
    """The kernel side (download, vmlinux, modules, initrd) runs in a thread while the
    rootfs is debootstrapped: they are independent until the rootfs takes the net modules.
    timings, if given, gets each part's seconds (near 0 when it was cached)."""
    timings = {} if timings is None else timings

    def kernel_and_initrd() -> tuple[Path, Path]:
        started = time.monotonic()
        kernel_dir = _kernel_side()
        initrd = build_initrd(kernel_dir)
        timings["kernel_net_modules_initrd"] = round(time.monotonic() - started, 1)
        return kernel_dir, initrd

    with ThreadPoolExecutor(max_workers=1) as pool:
        kernel_side = pool.submit(kernel_and_initrd)
        started = time.monotonic()
        rootfs = build_rootfs(_net_modules_dir(kernel_package()), timings, kernel_side.result)
        timings["rootfs"] = round(time.monotonic() - started, 1)
        kernel_dir, initrd = kernel_side.result()
    return Images(kernel_dir / "vmlinux", initrd, rootfs)


if __name__ == "__main__":
    t0 = time.monotonic()
    print(build_all(), f"{time.monotonic() - t0:.1f}s")
