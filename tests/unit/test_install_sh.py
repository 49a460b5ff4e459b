"""install.sh as an operator runs it (issue 36 #7), with the commands it calls (dpkg,
tcl-agent, systemctl...) replaced by recorders on PATH: the join token reaches
`tcl-agent join` on stdin, never in any argv; no .deb is picked up from the current
directory by name (a planted tcluster_*.deb was installed before)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tcj.0123456789abcdef.secret-part-of-the-token"
STUBS = {
    "dpkg-query": 'echo "$INSTALLED"',
    "dpkg": 'echo "dpkg $*" >> "$LOG"',
    "tcl-agent": 'echo "tcl-agent $*" >> "$LOG"; echo "stdin: $(cat)" >> "$LOG"',
    "tcl": 'echo "tcl $*" >> "$LOG"',
    "systemctl": 'echo "systemctl $*" >> "$LOG"',
    "journalctl": 'true',
}


def install_sh(tmp_path: Path, *args: str, stdin: str = "", installed: bool = True) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\n{body}\n")
        stub.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log),
           "INSTALLED": "install ok installed" if installed else "", "TCL_INSTALL_STATE_DIR": str(tmp_path / "state")}
    env.pop("TCL_JOIN_TOKEN", None)
    done = subprocess.run(["sh", str(REPO / "install.sh"), *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    return done.returncode, done.stderr, log.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="install.sh refuses to run as anyone but root")
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_the_token_reaches_the_join_on_stdin_never_in_an_argv(tmp_path: Path, how: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    source = ["--token-file", str(token_file)] if how == "file" else ["--token-file", "-"]
    rc, err, calls = install_sh(tmp_path, "--master", "10.0.0.1:7070", *source, "--node", "n1", "--skip-preflight",
                                stdin=TOKEN + "\n" if how == "stdin" else "")
    join = [line for line in calls.splitlines() if line.startswith("tcl-agent join")]
    assert join == [f"tcl-agent join --master 10.0.0.1:7070 --token-file - --state-dir {tmp_path / 'state'} --node n1"], (rc, err, calls)
    assert f"stdin: {TOKEN}" in calls and calls.count(TOKEN) == 1         # stdin only


@pytest.mark.skipif(os.geteuid() != 0, reason="install.sh refuses to run as anyone but root")
def test_a_deb_in_the_current_directory_is_not_installed_by_name(tmp_path: Path) -> None:
    (tmp_path / "tcluster_9.9.9_all.deb").write_text("planted")
    rc, err, calls = install_sh(tmp_path, "--master", "m:1", "--token-file", "-", stdin=TOKEN, installed=False)
    assert rc == 1 and "no package given and tcluster is not installed" in err and "dpkg " not in calls
    rc, err, calls = install_sh(tmp_path, "./tcluster_9.9.9_all.deb", "--master", "m:1", "--token-file", "-",
                                "--skip-preflight", stdin=TOKEN)
    assert "dpkg --force-confold -i ./tcluster_9.9.9_all.deb" in calls                # named: installed
    rc, err, calls = install_sh(tmp_path, "--master", "m:1", "--skip-preflight", stdin=TOKEN)
    assert rc == 1 and "a join token is needed: --token-file FILE" in err and "tcl-agent join" not in calls


def test_tcl_agent_join_reads_its_token_from_a_file_stdin_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    from tcluster.agent.joincmd import build_parser, read_token
    from tcluster.domain.errors import InvalidArgument
    (tmp_path / "t").write_text(f"  {TOKEN}\n")
    assert read_token(build_parser().parse_args(["--master", "m:1", "--token-file", str(tmp_path / "t")])) == TOKEN
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))
    assert read_token(build_parser().parse_args(["--master", "m:1", "--token-file", "-"])) == TOKEN
    monkeypatch.setenv("TCL_JOIN_TOKEN", TOKEN)
    assert read_token(build_parser().parse_args(["--master", "m:1"])) == TOKEN
    (tmp_path / "big").write_text("x" * 5000)
    with pytest.raises(InvalidArgument, match="more than 4096 bytes"):
        read_token(build_parser().parse_args(["--master", "m:1", "--token-file", str(tmp_path / "big")]))
    with pytest.raises(InvalidArgument, match="cannot read"):
        read_token(build_parser().parse_args(["--master", "m:1", "--token-file", str(tmp_path / "none")]))
    with pytest.raises(SystemExit):                                      # one source, not both
        build_parser().parse_args(["--master", "m:1", "--token", "a", "--token-file", "-"])
