"""cgroup v2 and systemd, for real, in a Debian guest under qemu (software emulation).

One boot per run (the session fixture `guest`, tests/vm/conftest.py, which
test_package.py shares): inside, the system and fault tests marked `guest` run
against cgroup v2 (the same tests run against v1 on this host; they are the ones whose code
differs between the two, tests/vm/selection.py), then the package's checks
(test_package.py: its units verified, started, an agent restarted under a running task),
then the secure join flow on systemd/'s units, across a reboot of the guest
(tests/vm/guest_secure.py). Images are built once and cached outside the repo (tests/vm/images.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.vm.qemu import REPO
from tests.vm.selection import GUEST_TESTS

# The first test waits for the guest's whole run (GUEST_TIMEOUT_S, 4100 s at most): above
# pyproject's per-test timeout, which is for the host's tests.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(4500)]


def test_guest_is_pure_cgroup_v2(guest: dict[str, Any]) -> None:
    assert {"cpu", "memory", "pids"} <= set(guest["controllers"]), guest["controllers"]


def test_the_guest_has_the_task_network_modules(guest: dict[str, Any]) -> None:
    modules = guest["net_modules"]
    assert modules["modprobe_rc"] == 0, modules
    assert modules["loaded"] == sorted(["veth", "bridge", "sch_htb", "nf_tables", "nft_chain_nat", "nft_masq"]), modules


def test_system_tests_pass_on_cgroup_v2(guest: dict[str, Any]) -> None:
    result = guest["system_tests"]
    log = (Path(guest["share"]) / "system-tests.log").read_text()
    print(f"\n[vm] tests/system on cgroup v2 ({guest['kernel']}): {result['summary']} in {result['seconds']}s")
    print("\n".join(line for line in log.splitlines() if line.startswith(("SKIPPED", "FAILED", "[fig"))))
    assert result["rc"] == 0, log[-6000:]
    assert "skipped" not in result["summary"], result["summary"]
    # Every test marked for the guest passed there, the one that changes the real firewall included.
    passed = _passed(Path(guest["share"]) / "junit.xml")
    assert _guest_marked() - passed == set()
    for name in ("test_two_shaped_senders_get_their_rates", "test_masquerade_inside_a_private_host_namespace",
                 "test_masquerade_in_the_guests_own_firewall"):
        assert ("tests.system.test_task_network", name) in passed, name


def _guest_marked() -> set[tuple[str, str]]:
    """(classname, name), as junit writes them, of every test the guest is to run."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *GUEST_TESTS], cwd=REPO, capture_output=True, text=True, timeout=300)
    ids = [line.split("::", 1) for line in listed.stdout.splitlines() if "::" in line]
    assert ids, listed.stdout[-3000:] + listed.stderr[-3000:]
    return {(path.removesuffix(".py").replace("/", "."), name) for path, name in ids}


def _passed(junit: Path) -> set[tuple[str, str]]:
    """(classname, name) of every test case the junit report shows passed."""
    import xml.etree.ElementTree as ET
    return {(case.get("classname", ""), case.get("name", "")) for case in ET.parse(junit).iter("testcase")
            if not any(child.tag in ("failure", "error", "skipped") for child in case)}


def test_a_joined_agent_unit_reconnects_with_its_certificate_after_a_reboot(guest: dict[str, Any]) -> None:
    secure = guest["secure"]
    before, after = secure["before"], secure.get("after")
    assert (before["init_rc"], before["token_rc"], before["join_rc"], before["enable_rc"]) == (0, 0, 0, 0), before
    assert before["key_mode"] == "0o600" and before["ready_before"], before
    assert after is not None, "the guest did not come back from its reboot"
    journal = (Path(guest["share"]) / "journal-after-reboot.log").read_text()
    assert after["boot_id"] != before["boot_id"], (before, after)
    assert after["enabled"] == ["enabled", "enabled"], after
    assert after["ready_after"] and after["agent_mtls"] and after["registered"], (after, journal[-3000:])
