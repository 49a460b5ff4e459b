"""The agent's persisted fence clock (agent/fence.py): how much silence a restarted agent
counts, as a table, and how often and how it writes its last contact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tcluster.agent import fence
from tcluster.agent.fence import Heard, LastHeard, load, silence_at_start

BOOT = "b1"


@pytest.mark.parametrize(("persisted", "boot", "now", "silence", "why"), [
    (None, BOOT, 100.0, 0.0, "first start: nothing to count from"),
    (Heard(BOOT, 90.0), BOOT, 100.0, 10.0, "restart in the same boot: silence since the last word"),
    (Heard(BOOT, 100.0), BOOT, 100.0, 0.0, "heard just now"),
    (Heard("b0", 90.0), BOOT, 100.0, 0.0, "rebooted (another boot id): tasks died with the machine"),
    (Heard("", 500.0), "", 100.0, 0.0, "no boot id, clock behind the record: a reboot"),
    (Heard("", 90.0), "", 100.0, 10.0, "no boot id, clock ahead: counted (errs toward fencing)"),
    (Heard(BOOT, 0.0), BOOT, 10_000.0, 10_000.0, "stopped long ago: fences at once"),
])
def test_silence_at_start(persisted: Heard | None, boot: str, now: float, silence: float, why: str) -> None:
    assert silence_at_start(persisted, boot, now) == silence, why


@pytest.mark.parametrize("content", ["", "{", "[]", '{"at": 1}', '{"boot_id": "b", "at": "x"}', "null"])
def test_an_unreadable_record_counts_as_none(tmp_path: Path, content: str) -> None:
    (tmp_path / fence.LAST_HEARD_FILE).write_text(content)
    assert load(tmp_path / fence.LAST_HEARD_FILE) is None


def test_contact_is_written_at_most_once_a_second_and_atomically(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(fence, "boot_now", lambda: clock[0])
    contact = LastHeard(tmp_path)
    contact.heard()
    written = [load(contact.path)]
    for step in (0.3, 0.3, 0.3, 0.2, 0.5):       # 1000.3 .. 1001.6
        clock[0] += step
        contact.heard()
        written.append(load(contact.path))
    assert [h.at if h else None for h in written] == pytest.approx([1000.0, 1000.0, 1000.0, 1000.0, 1001.1, 1001.1])
    assert not contact.path.with_name(fence.LAST_HEARD_FILE + ".tmp").exists()
    assert contact.path.stat().st_mode & 0o777 == 0o600
    assert json.loads(contact.path.read_text())["boot_id"] == contact.boot
    clock[0] += 4.0
    assert LastHeard(tmp_path).silence_at_start() == pytest.approx(4.5)   # a restart counts from the record


def test_a_failed_write_keeps_the_older_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [10.0]
    monkeypatch.setattr(fence, "boot_now", lambda: clock[0])
    contact = LastHeard(tmp_path)
    contact.heard()
    contact.path.with_name(fence.LAST_HEARD_FILE + ".tmp").mkdir()    # the write fails (as on a full disk)
    clock[0] = 20.0
    contact.heard()
    held = load(contact.path)
    assert held is not None and held.at == 10.0     # older: a restart would fence sooner, never later


def test_the_real_clock_and_boot_id() -> None:
    assert fence.boot_now() > 0
    assert fence.boot_id() != ""            # Linux: /proc/sys/kernel/random/boot_id


def test_a_new_fence_limit_is_saved_at_once_not_a_second_later(tmp_path: Path) -> None:
    """The first word (registration) comes before the limit is known; a quiet agent may hear
    nothing more for a usage interval, and a lease left at fence_s 0 fences nothing."""
    heard = LastHeard(tmp_path)
    heard.heard(0.0)
    heard.heard(8.0)
    assert json.loads((tmp_path / fence.LAST_HEARD_FILE).read_text())["fence_s"] == 8.0
    heard.heard(8.0)                       # the same limit within the second: not rewritten
    assert json.loads((tmp_path / fence.LAST_HEARD_FILE).read_text())["fence_s"] == 8.0
