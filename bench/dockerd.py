"""A private Docker engine for side-by-side benchmarks (HOST.md's recipe): its own data
and exec roots and socket, no iptables, no bridge; a busybox image imported from the
host's busybox-static (no registry is reachable). Stopped by its pid; the `docker` groups
it leaves in the cgroup hierarchies are removed (only those, only when empty)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from types import TracebackType

import docker

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "true", "false", "sleep", "cat", "echo", "dd", "head", "id", "kill", "ls", "yes", "env", "pwd", "[", "test", "seq", "nc")


def docker_missing(cli: bool = True) -> str | None:
    """Why a private engine cannot be started here (None: it can). `cli`: the `docker`
    command is needed too (the benchmark's `docker run` comparison)."""
    if os.geteuid() != 0:
        return "starting dockerd needs root"
    for tool in ("dockerd", "docker") if cli else ("dockerd",):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install docker.io)"
    if not BUSYBOX.exists():
        return "busybox-static is not installed (needed to build a local image)"
    return None


class Dockerd:
    image = "tcl-bench-busybox"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.setuid_image: str | None = None

    def __enter__(self) -> Dockerd:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
             "--pidfile", str(self.root / "docker.pid"), "-H", f"unix://{self.sock}", "--iptables=false",
             # --ip-forward=false: else dockerd turns the host's IPv4 forwarding on
             "--ip-masq=false", "--ip-forward=false", "--bridge=none"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"dockerd did not come up: {(self.root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        self._import_busybox()
        return self

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def _answers(self) -> bool:
        try:
            client = docker.APIClient(base_url=self.url, timeout=5)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except (docker.errors.DockerException, OSError):
            return False
        finally:
            client.close()

    def _import_busybox(self, image: str = "", setuid: bool = False) -> None:
        """The busybox image; `setuid`: plus /bin/busybox-suid, a setuid-root copy, and an
        /etc/busybox.conf that lets its `ash` keep euid 0 (busybox drops a setuid bit
        otherwise): what a hostile image would carry to regain root."""
        with tempfile.TemporaryDirectory() as tmp:
            tar_path = Path(tmp) / "bb.tar"
            with tarfile.open(tar_path, "w") as tar:
                tar.add(BUSYBOX, "bin/busybox")
                for tool in APPLETS:
                    link = tarfile.TarInfo(f"bin/{tool}")
                    link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(link)
                if setuid:
                    _add_setuid_root(tar)
            client = docker.APIClient(base_url=self.url, timeout=120)
            try:
                client.import_image(src=str(tar_path), repository=image or self.image, tag="latest",
                                    changes=['CMD ["/bin/sh"]'])
            finally:
                client.close()

    def import_setuid_image(self) -> str:
        """A second image with a setuid-root busybox (see _import_busybox); its name."""
        if self.setuid_image is None:        # once per engine: tests of one session share it
            self._import_busybox(f"{self.image}-suid", setuid=True)
            self.setuid_image = f"{self.image}-suid"
        return self.setuid_image

    def docker(self, *args: str) -> str:
        done = subprocess.run(["docker", "-H", self.url, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def run(self, *args: str) -> str:
        return self.docker("run", *args)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _remove_docker_cgroups()
        _unmount_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def _add_setuid_root(tar: tarfile.TarFile) -> None:
    copy = tar.gettarinfo(str(BUSYBOX), "bin/busybox-suid")
    copy.uid = copy.gid = 0
    copy.mode = 0o4755
    with open(BUSYBOX, "rb") as f:
        tar.addfile(copy, f)
    conf = b"[SUID]\nash = ssx 0.0\n"     # ash only: plain sh runs as usual
    info = tarfile.TarInfo("etc/busybox.conf")
    info.size, info.mode, info.uid, info.gid = len(conf), 0o644, 0, 0
    tar.addfile(info, io.BytesIO(conf))


def _unmount_under(root: Path) -> None:
    """dockerd leaves mounts in its exec root (exec/netns/default, a bind of the host's
    network namespace): detach those under our root, deepest first, so it can be removed."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    prefix = str(root.resolve()) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        libc.umount2(point.encode(), 2)          # MNT_DETACH


def _remove_docker_cgroups() -> None:
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / "docker"
        if not top.is_dir():
            continue
        for group in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
            if group.is_dir():
                try:
                    os.rmdir(group)
                except OSError:
                    pass
        try:
            os.rmdir(top)
        except OSError:
            pass
