"""Suite-wide: print how many tests were skipped and why, so a skip never hides."""

from __future__ import annotations

from collections import Counter

import pytest


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
