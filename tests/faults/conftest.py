"""Fixtures of the fault suite: a small disk and a cluster of real processes."""

from tests.faults.disk import small_disk  # noqa: F401  (re-exported fixture)
