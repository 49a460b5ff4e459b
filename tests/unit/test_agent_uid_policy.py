"""The agent's own rule on whom tasks run as, whatever the master asks."""

from __future__ import annotations

import pwd

import pytest
from pydantic import ValidationError

from tcluster.agent.runas import parse_uid_ranges, task_user
from tcluster.agent.runtime.base import LaunchError
from tcluster.agent.settings import AgentSettings

SYSTEM = parse_uid_ranges("0-999")


@pytest.mark.parametrize("requested, allow_root, refused", [
    ("daemon", False, "may not run as 'daemon' (uid 1) on this node: uids 0-999 are refused"),
    ("1", True, "uids 0-999 are refused (`tcl-agent --deny-uids`)"),       # --allow-root is for root only
    ("root", False, "may not run as root"),
    ("0", False, "--allow-root"),
])
def test_system_users_and_root_are_refused(requested: str, allow_root: bool, refused: str) -> None:
    with pytest.raises(LaunchError) as error:
        task_user(requested, "nobody", allow_root, SYSTEM)
    assert refused in str(error.value)


def test_what_is_allowed() -> None:
    assert task_user("", "nobody", False, SYSTEM) == "nobody"             # nobody is excepted
    assert task_user("root", "nobody", True, SYSTEM) == "root"           # root only with --allow-root
    assert task_user("daemon", "nobody", False, ()) == "daemon"          # an operator who cleared the range
    assert task_user("daemon", "nobody", False, parse_uid_ranges("1000-2000")) == "daemon"
    high = next((p for p in pwd.getpwall() if 1000 <= p.pw_uid < 60000), None)
    if high is not None:
        assert task_user(high.pw_name, "nobody", False, SYSTEM) == high.pw_name


@pytest.mark.parametrize("text, ranges", [("0-999", ((0, 999),)), ("", ()), ("none", ()),
                                          ("0-99, 500,600-700", ((0, 99), (500, 500), (600, 700)))])
def test_ranges_parse(text: str, ranges: tuple[tuple[int, int], ...]) -> None:
    assert parse_uid_ranges(text) == ranges


@pytest.mark.parametrize("bad", ["abc", "5-1", "-3", "1-x"])
def test_bad_ranges_name_the_setting(bad: str) -> None:
    with pytest.raises(ValidationError, match="deny_uids"):
        AgentSettings(cpus=1, memory_bytes=2**30, deny_uids=bad)
    assert AgentSettings(cpus=1, memory_bytes=2**30).denied_uids == ((0, 999),)
