"""Man pages generated from the parsers: tcl(1) names every subcommand and every flag, each
daemon's page every flag and offline command; groff renders them without a warning, and
`man -l` shows them. The package lays them out gzipped, with the completion scripts."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tcluster.cli.fedparser import FEDERATION_COMMANDS
from tcluster.cli.main import LOCAL_COMMANDS, MASTER_COMMANDS
from tcluster.cli.manpages import man_page, roff_text, write_pages
from tcluster.cli.parsertree import PROGRAMS

REPO = Path(__file__).resolve().parents[2]
# The man(7) requests the generator may write; anything else would be a bug in it.
MAN_REQUESTS = {".TH", ".SH", ".SS", ".PP", ".TP", ".RS", ".RE", ".nf", ".fi"}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("man")
    return {path.name.rsplit(".", 1)[0]: path for path in write_pages(out)}


def sections(page: str) -> dict[str, str]:
    """'.SS "tcl node cordon"' -> the roff up to the next .SS or .SH."""
    parts = re.split(r'^\.(?:SS|SH) "?([^"\n]*)"?$', page, flags=re.M)
    return {parts[i].replace("\\-", "-"): parts[i + 1] for i in range(1, len(parts), 2)}


def test_the_pages_are_written_with_their_sections(pages: dict[str, Path]) -> None:
    assert sorted(path.name for path in pages.values()) == ["tcl-agent.8", "tcl-gm.8", "tcl-master.8", "tcl.1"]


def test_tcl_1_names_every_subcommand_and_its_flags(pages: dict[str, Path]) -> None:
    found = sections(pages["tcl"].read_text())
    tree = PROGRAMS["tcl"][1]()
    for command in MASTER_COMMANDS.keys() | LOCAL_COMMANDS.keys() | FEDERATION_COMMANDS.keys():
        assert f"tcl {command}" in found, command
    for cmd in tree.walk()[1:]:
        text = found[cmd.name]
        for opt in cmd.options:
            for flag in opt.flags:
                assert f"\\fB{roff_text(flag)}\\fR" in text, (cmd.name, flag)
        for pos in cmd.positionals:
            assert f"\\fI{roff_text(pos.name)}\\fR" in text, (cmd.name, pos.name)
    assert "\\fB\\-\\-version\\fR" in found["OPTIONS"]


@pytest.mark.parametrize("program", ["tcl-master", "tcl-agent", "tcl-gm"])
def test_each_daemon_page_names_its_flags_and_commands(program: str, pages: dict[str, Path]) -> None:
    from tcluster.agent.main import build_parser as agent
    from tcluster.gm.settings import build_parser as gm
    from tcluster.master.app.main import build_parser as master
    parser = {"tcl-master": master, "tcl-agent": agent, "tcl-gm": gm}[program]()
    page = pages[program].read_text()
    found = sections(page)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:    # hidden on purpose (test hooks): not in --help either
            continue
        for flag in action.option_strings:
            assert f"\\fB{roff_text(flag)}\\fR" in found["OPTIONS"], flag
    commands = {"tcl-master": ["init", "join-token create", "node revoke", "user add", "user list", "user remove",
                               "status", "gm issue"],
                "tcl-agent": ["join"], "tcl-gm": ["queues"]}[program]
    for command in commands:
        assert f"{program} {command}" in found, command


def test_pages_are_deterministic() -> None:
    tree = PROGRAMS["tcl-gm"][1]()
    assert man_page(tree, 8, "1.0") == man_page(PROGRAMS["tcl-gm"][1](), 8, "1.0")


def test_roff_sanity(pages: dict[str, Path]) -> None:
    """Without groff: every request is one of man(7)'s, and no text line could read as one."""
    for path in pages.values():
        for number, line in enumerate(path.read_text().split("\n"), start=1):
            if line.startswith((".", "'")):
                assert line.split(" ")[0] in MAN_REQUESTS, f"{path.name}:{number}: {line}"


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_groff_renders_without_warnings(pages: dict[str, Path]) -> None:
    for path in pages.values():
        done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(path)], capture_output=True, text=True)
        assert done.returncode == 0 and done.stderr == "", f"{path.name}: {done.stderr}"


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_shows_them(pages: dict[str, Path]) -> None:
    done = subprocess.run(["man", "-l", str(pages["tcl"])], capture_output=True, text=True,
                          env={"MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "tcl submit" in done.stdout and "--time-limit" in done.stdout and "EXIT STATUS" in done.stdout


def test_the_package_installs_pages_and_completion(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("tcl_build_deb_docs", REPO / "packaging" / "build_deb.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.docs(tmp_path, "0.1.0")
    man = tmp_path / "usr" / "share" / "man"
    assert sorted(str(p.relative_to(man)) for p in man.rglob("*.gz")) == \
        ["man1/tcl.1.gz", "man8/tcl-agent.8.gz", "man8/tcl-gm.8.gz", "man8/tcl-master.8.gz"]
    assert gzip.decompress((man / "man1" / "tcl.1.gz").read_bytes()).startswith(b'.TH "TCL" "1" "" "tcluster 0.1.0"')
    assert "complete -o bashdefault -o default -F _tcl tcl" in (tmp_path / build.BASH_COMPLETION).read_text()
    assert (tmp_path / build.ZSH_COMPLETION).read_text().startswith("#compdef tcl\n")
    for daemon in ("tcl-master", "tcl-agent", "tcl-gm"):   # the daemons' flags complete too
        bash = (tmp_path / build.BASH_COMPLETION).with_name(daemon).read_text()
        assert f"-F _{daemon.replace('-', '_')} {daemon}" in bash and "--version" in bash, bash[:300]
        assert (tmp_path / build.ZSH_COMPLETION).with_name(f"_{daemon}").read_text().startswith(f"#compdef {daemon}\n")
    assert build.ENTRY_POINTS["tcl-gm"] == "tcluster.gm.main"
