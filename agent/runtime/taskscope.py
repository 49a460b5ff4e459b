"""The agent's tasks in a delegated systemd scope: cgroup v2 under systemd, as Slurm's
slurmd keeps its job steps in slurmstepd.scope.

Why not the agent's own unit: a Delegate=yes service whose group holds task groups with
controllers enabled cannot be restarted by systemd before v254 (no DelegateSubgroup=): the
new main process must go into the unit's own group, which cgroup v2 refuses once that
group has controllers on for its children (219/CGROUP, measured in tests/vm). And a group
outside every unit (the old default, tcluster/<node>) is what systemd's delegation rules
tell a manager not to make. So the agent asks systemd for a transient scope of its own,
`tcluster.slice/tcl-tasks-<node>.scope`, with Delegate=yes: systemd enables the
controllers down to it and then leaves what is below it to the agent. A scope lives as long
as it holds a process and is never restarted, so a small keeper (`sleep infinity`) holds it
in its leaf `keeper`; the tasks go in `tasks/<key>`. An agent restart (upgrade, crash,
watchdog) finds the scope and its tasks where it left them; `systemctl stop
tcl-tasks-<node>.scope` ends every task of the node at once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Literal

from .base import RuntimeSetupError
from .cgfs import read_pids, read_text
from .writer import write_file

log = logging.getLogger(__name__)

SLICE = "tcluster.slice"
KEEPER = "keeper"
TASKS = "tasks"
START_TIMEOUT_S = 60.0      # systemd-run on a software-emulated guest takes seconds
Outcome = Literal["adopted", "kept", "created"]


def unit_name(node: str) -> str:
    return f"tcl-tasks-{node}.scope"


def scope_group(node: str) -> str:
    """The scope's group, relative to the cgroup2 mount."""
    return f"{SLICE}/{unit_name(node)}"


def start_command(node: str, systemd_run: str, sleep: str) -> list[str]:
    """systemd-run asks systemd for the scope with its own pid in it, then becomes the keeper.
    TasksMax=infinity: each task has its own pids.max; --collect: a failed scope is not kept."""
    return [systemd_run, "--scope", "--quiet", "--collect", f"--unit={unit_name(node)}", f"--slice={SLICE}",
            f"--description=tcluster tasks of node {node} (tcl-agent)", "--property=Delegate=yes",
            "--property=TasksMax=infinity", "--", sleep, "infinity"]


def _reap(process: subprocess.Popen[bytes]) -> None:
    """The keeper is the agent's child until the agent exits: waited for in a thread, so a
    killed keeper leaves no zombie."""
    threading.Thread(target=process.wait, name="tcl-scope-keeper", daemon=True).start()


def _populated(group: Path) -> bool:
    """Some process is in the group or below it (cgroup.events)."""
    return "populated 1" in (read_text(group / "cgroup.events") or "")


def _make_leaf(leaf: Path) -> None:
    """mkdir, no parents: a scope's group systemd just removed is not made again outside its unit."""
    try:
        os.mkdir(leaf)
    except FileExistsError:
        pass


def _in_group(pid: int, group: str) -> bool | None:
    """Whether pid's cgroup is `group` (None: the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return f"0::/{group}" in text.splitlines()


class TaskScope:
    """Makes sure tcl-tasks-<node>.scope exists, held by a keeper, before task groups are made."""

    def __init__(self, root: Path, node: str, spawn: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
                 timeout_s: float = START_TIMEOUT_S) -> None:
        self.root, self.node = root, node
        self.group = root / scope_group(node)
        self._spawn, self._timeout_s = spawn, timeout_s

    @staticmethod
    def tools() -> tuple[str, str]:
        systemd_run, sleep = shutil.which("systemd-run"), shutil.which("sleep")
        if systemd_run is None or sleep is None:
            raise RuntimeSetupError("--cgroup-parent scope needs systemd-run and sleep on PATH (systemd's and "
                                    "coreutils' packages); or set --cgroup-parent to a path")
        return systemd_run, sleep

    def ensure(self) -> Outcome:
        """'adopted', 'kept' (its tasks held it without a keeper: a new keeper) or 'created'."""
        if self.group.is_dir():
            for stray in read_pids(self.group / "cgroup.procs"):
                self._rehold(stray)
            if read_pids(self.group / KEEPER / "cgroup.procs"):
                return "adopted"
            if _populated(self.group):
                self._new_keeper()
                return "kept"
            self._wait_removed()      # empty: systemd is stopping it and removes its group
        self._create()
        return "created"

    def _wait_removed(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        while self.group.is_dir():
            if time.monotonic() > deadline:
                raise RuntimeSetupError(f"{self.group} holds no process and systemd did not remove it: is "
                                        f"{unit_name(self.node)} failed? systemctl reset-failed it, or rmdir the group")
            time.sleep(0.05)

    def _create(self) -> None:
        systemd_run, sleep = self.tools()
        with tempfile.TemporaryFile() as err:
            keeper = self._spawn(start_command(self.node, systemd_run, sleep), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, close_fds=True)
            if not self._wait_in_scope(keeper):
                keeper.kill()
                code = keeper.wait()
                err.seek(0)
                said = err.read(2000).decode(errors="replace").strip() or f"exit status {code}, no output"
                raise RuntimeSetupError(f"systemd-run could not start {unit_name(self.node)}: {said}")
        _reap(keeper)
        self._hold(keeper)
        log.info("task cgroups: %s (a delegated systemd scope, kept by pid %d)", self.group, keeper.pid)

    def _wait_in_scope(self, keeper: subprocess.Popen[bytes]) -> bool:
        """systemd-run moves itself into the scope, then execs the keeper; False if it exits
        first (the error is on its stderr) or takes longer than the timeout."""
        group = scope_group(self.node)
        deadline = time.monotonic() + self._timeout_s
        while keeper.poll() is None and time.monotonic() < deadline:
            if _in_group(keeper.pid, group):
                return True
            time.sleep(0.05)
        return False

    def _new_keeper(self) -> None:
        """The scope outlived its keeper (someone killed it) because tasks still hold it: a new
        keeper, so that it stays once they end."""
        _, sleep = self.tools()
        keeper = self._spawn([sleep, "infinity"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        _reap(keeper)
        self._hold(keeper)
        log.info("task cgroups: %s had no keeper; now pid %d", self.group, keeper.pid)

    def _rehold(self, pid: int) -> None:
        """A process in the scope's own group: a keeper an agent killed between systemd-run
        and _hold left there (nothing else is put there: tasks go below `tasks`). Moved into
        the leaf, or the scope's controllers stay refused (EBUSY) at every start."""
        leaf = self.group / KEEPER
        try:
            _make_leaf(leaf)
            write_file(leaf / "cgroup.procs", str(pid))
        except ProcessLookupError:
            pass                       # gone meanwhile
        except OSError as e:
            raise RuntimeSetupError(f"cannot move pid {pid} from {self.group} into {leaf}: {e.strerror}") from e

    def _hold(self, keeper: subprocess.Popen[bytes]) -> None:
        """Into the leaf `keeper`: the scope's own group must hold no process, or cgroup v2
        refuses the controllers its task groups need."""
        leaf = self.group / KEEPER
        try:
            _make_leaf(leaf)
            write_file(leaf / "cgroup.procs", str(keeper.pid))
        except OSError as e:
            keeper.kill()             # a keeper left in the scope's root would block its controllers
            raise RuntimeSetupError(f"cannot move the scope's keeper into {leaf}: {e.strerror}") from e
