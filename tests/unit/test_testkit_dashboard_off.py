"""testkit.procs: a test's serving tcl-master runs without its dashboard unless the test asks
for one (`--http ADDR`) or passes a config file that may: half of a master's start is the
dashboard's import, and most tests never read it."""

from __future__ import annotations

import pytest

from testkit.procs import DASHBOARD_OFF, without_unasked_dashboard

SERVE = ["/v/bin/tcl-master", "--listen", "127.0.0.1:0", "--data-dir", "/d"]


@pytest.mark.parametrize("args, added", [
    (SERVE, True),
    (["/v/bin/tcl-master"], True),
    ([*SERVE, "--http", "127.0.0.1:0"], False),          # the dashboard tests ask for it
    ([*SERVE, "--http=off"], False),
    (["/v/bin/tcl-master", "--config", "/etc/m.toml"], False),   # the file may set http
    (["/v/bin/tcl-master", "init", "--data-dir", "/d"], False),  # a subcommand serves nothing
    (["/v/bin/tcl-agent", "--master", "127.0.0.1:1"], False),
    (["/v/bin/tcl", "status"], False),
])
def test_only_a_serving_master_without_http_gets_it_off(args: list[str], added: bool) -> None:
    out = without_unasked_dashboard(list(args))
    assert out == ([*args, *DASHBOARD_OFF] if added else args)
