"""The fence clock that survives an agent restart: when the agent last heard the master,
kept in its state dir as a CLOCK_BOOTTIME reading plus the kernel's boot id.

A restarted agent that is still cut off must fence the tasks it re-adopts at the same
deadline as if it had never restarted: the master's LOST clock kept running from the
node's last message, not from the agent's start. So on start the agent counts silence
from the persisted moment (`silence_at_start`), not from zero.

CLOCK_BOOTTIME, unlike the wall clock, never steps, and unlike CLOCK_MONOTONIC it keeps
counting through a suspend (the master's clock did too). It restarts at a reboot, which is
why the boot id is kept with it: after a reboot the tasks died with the machine, there is
nothing to fence, and the old reading means nothing.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tcluster.agent.outbox import private_opener

log = logging.getLogger(__name__)
LAST_HEARD_FILE = "last_heard.json"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
# The agent hears the master several times a second (acks, heartbeat replies): writing every
# message would be a write storm for nothing. Writing at most once a second leaves the file at
# most SAVE_EVERY_S behind the truth, and an OLDER "last heard" only makes a restarted agent
# count more silence, so fence SOONER: staleness errs on the safe side (never two copies).
# No fsync either: a process crash keeps the page cache; losing it takes a power loss, that
# is a reboot, which kills the tasks anyway (and the boot id then differs).
SAVE_EVERY_S = 1.0


@dataclass(frozen=True)
class Heard:
    """The last word from the master: which boot, and when on that boot's CLOCK_BOOTTIME."""
    boot_id: str
    at: float


def boot_now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def boot_id() -> str:
    """The kernel's id of this boot ("" where there is none: then only a clock reading
    that went backwards tells a reboot)."""
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def silence_at_start(persisted: Heard | None, boot: str, now: float) -> float:
    """Seconds the agent had already gone without word from the master when it started.
    0 when there is nothing to count from: no record (first start), another boot, or a
    reading from the future (a reboot on a system without a boot id)."""
    if persisted is None or persisted.boot_id != boot or persisted.at > now:
        return 0.0
    return now - persisted.at


def load(path: Path) -> Heard | None:
    """The persisted reading, or None if missing or unreadable (counted as no record)."""
    try:
        raw = json.loads(path.read_text())
        return Heard(str(raw["boot_id"]), float(raw["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class LastHeard:
    """Records word from the master; writes it (atomically: temp file, rename) at most
    every SAVE_EVERY_S. Not thread-safe: the agent's event loop alone calls it."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LAST_HEARD_FILE
        self.boot = boot_id()
        self._saved_at = float("-inf")
        self._saved_fence_s = 0.0

    def silence_at_start(self) -> float:
        return silence_at_start(load(self.path), self.boot, boot_now())

    def heard(self, fence_s: float = 0.0) -> None:
        """fence_s: the silence after which the agent stops re-runnable tasks (0: no fence).
        Saved with the reading, it makes the file the lease each task's shim enforces when no
        agent runs (agent/shim.c): a shim fences at at + fence_s, plus a second of slack."""
        now = boot_now()
        # A new limit is saved at once: the first word (registration) comes before the limit
        # is known, and a quiet agent may hear nothing more for a usage interval.
        if now - self._saved_at < SAVE_EVERY_S and fence_s == self._saved_fence_s:
            return
        self._saved_at, self._saved_fence_s = now, fence_s
        tmp = self.path.with_name(LAST_HEARD_FILE + ".tmp")
        try:
            with open(tmp, "w", opener=private_opener) as out:
                out.write(json.dumps({"boot_id": self.boot, "at": now, "fence_s": fence_s}))
            tmp.replace(self.path)
        except OSError as error:   # a full disk: the old reading stays, older is safer
            log.warning("cannot record contact with the master in %s: %s", self.path, error)
