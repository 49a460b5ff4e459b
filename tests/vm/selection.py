"""Which tests the tests/vm guest reruns on cgroup v2: shared by the guest's runner
(guest_checks.py, which imports it as a sibling) and the host's check that each of them
passed there (test_vm.py)."""

from __future__ import annotations

# Marked `guest` (pyproject.toml): the code that differs between cgroup v1 and v2, the
# agent's fault scenarios among them, and the firewall. Which store the master uses (the
# [etcd] variants) is the host's business, and the guest has no etcd.
GUEST_TESTS: tuple[str, ...] = ("-m", "guest", "-k", "not etcd", "tests/system", "tests/faults")
