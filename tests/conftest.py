"""Suite-wide: print how many tests were skipped and why, so a skip never hides."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import settings

from testkit.docker_engine import docker_engine  # noqa: F401  (one private dockerd for the session)
from testkit.etcd_cluster import etcd, etcd_session  # noqa: F401  (session etcd cluster, a prefix per test)
from testkit.procs import gate_dir, sweep_nodes_of_this_run

# No wall-clock limits in tests: Hypothesis's 200 ms per-example deadline fails on a
# loaded shared machine without saying anything about the code under test.
settings.register_profile("tcluster", deadline=None)
settings.load_profile("tcluster")


@pytest.fixture(scope="session", autouse=True)
def _own_credentials_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`tcl dev` writes a login into the invoking user's config dir and `tcl` reads it: the
    suite (and every process it starts) uses a directory of its own, never the real
    ~/.config/tcluster, and no token from the environment."""
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "TCL_TOKEN", "TCL_CA")}
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("xdg-config"))
    os.environ.pop("TCL_TOKEN", None)
    os.environ.pop("TCL_CA", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def _credentials_env_put_back() -> Iterator[None]:
    """A test that points tcl elsewhere (a user's login) must not leave it so: a popped
    XDG_CONFIG_HOME once sent the rest of a run to ~/.config, whose stale logins made tcl
    speak TLS to later plaintext masters that reused their ports. Put back after each test."""
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "TCL_TOKEN", "TCL_CA")}
    stored = _stored_logins()
    before = stored.read_bytes() if stored.is_file() else None
    yield
    for key, value in saved.items():
        if os.environ.get(key) != value:
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    _put_back_logins(stored, before)


def _stored_logins() -> Path:
    from tcluster.cli.credentials import credentials_path
    return credentials_path()


def _put_back_logins(stored: Path, before: bytes | None) -> None:
    """A login a test stored in the suite's config dir (`tcl dev` stores one for its secure
    master, on a port of the moment) goes with the test: left, it made later in-process `tcl`
    calls speak TLS to a plaintext master that reused the port (CI of b982d81,
    tests/ha/test_leader_killed.py: "Tls handshake failed" from all three masters)."""
    now = stored.read_bytes() if stored.is_file() else None
    if now == before:
        return
    if before is None:
        stored.unlink(missing_ok=True)
    else:
        stored.write_bytes(before)


@pytest.fixture(scope="session", autouse=True)
def _sweep_this_runs_nodes() -> Iterator[None]:
    """Safety net: tasks outlive a stopped agent by design, so a test that fails half-way
    could leave containers running. Test node names carry this process's pid; at the end
    of the session every such node's subtree is swept. Tests still assert they leak nothing."""
    yield
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup"):
        swept = sweep_nodes_of_this_run(f"-{os.getpid()}-")
        if swept:
            print(f"\nswept cgroups left by failed tests: {swept}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keeps each phase's report on the item (`item.rep_call`): fixtures print a cluster's logs
    when the test they served failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def gates() -> Iterator[Path]:
    """A folder for gate files (testkit.procs.gated), removed after the test."""
    with gate_dir() as path:
        yield path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: Counter[str] = Counter()
    for report in skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    terminalreporter.write_sep("=", f"tcluster: {len(skipped)} skipped")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"  {count:4d} x {reason}")
