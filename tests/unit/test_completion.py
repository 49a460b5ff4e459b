"""`tcl completion bash|zsh`: scripts generated from the parsers. bash completes through its
own `complete -F` function (driven here as bash would, with COMP_WORDS); zsh through a real
interactive zsh on a pty (testkit/zsh_complete.zsh), where zsh is installed."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from tcluster.cli.completion import bash_script, zsh_script
from tcluster.cli.fedparser import FEDERATION_COMMANDS
from tcluster.cli.main import LOCAL_COMMANDS, MASTER_COMMANDS, main
from tcluster.cli.parsertree import PROGRAMS

REPO = Path(__file__).resolve().parents[2]
ZSH_COMPLETE = REPO / "testkit" / "zsh_complete.zsh"
RUNNABLE = sorted(MASTER_COMMANDS.keys() | LOCAL_COMMANDS.keys() | FEDERATION_COMMANDS.keys())


@pytest.fixture(scope="module")
def tree():  # type: ignore[no-untyped-def]
    return PROGRAMS["tcl"][1]()


@pytest.fixture(scope="module")
def bash_file(tmp_path_factory: pytest.TempPathFactory, tree) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("completion") / "tcl.bash"
    path.write_text(bash_script(tree))
    return path


def tcl_completion(shell: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["completion", shell]) == 0
    return out.getvalue()


def bash_complete(script: Path, lines: list[str], cwd: Path) -> list[list[str]]:
    """What bash offers for each line (the last word is the one being completed)."""
    calls = "\n".join(f"words=({line}); [[ '{line}' == *' ' ]] && words+=('');"
                      " COMP_WORDS=(\"${words[@]}\"); COMP_CWORD=$((${#words[@]} - 1)); COMPREPLY=(); _tcl;"
                      " echo \"${COMPREPLY[*]}\"" for line in lines)
    done = subprocess.run(["bash", "-c", f"source {script}\n{calls}"], capture_output=True, text=True, cwd=cwd,
                          timeout=60)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return [sorted(out.split()) for out in done.stdout.split("\n")[:len(lines)]]


def test_tcl_completion_prints_the_generated_scripts(tree) -> None:  # type: ignore[no-untyped-def]
    assert tcl_completion("bash") == bash_script(tree)
    assert tcl_completion("zsh") == zsh_script(tree)


def test_the_bash_script_parses_and_names_every_command(bash_file: Path) -> None:
    done = subprocess.run(["bash", "-n", str(bash_file)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = bash_file.read_text()
    for command in RUNNABLE:
        assert f" {command}" in text or f"'{command}" in text, command


CASES = [   # (line, what bash must offer)
    ("tcl su", ["submit"]),
    ("tcl node ", ["cordon", "drain", "forget", "maint", "uncordon"]),
    ("tcl submit --netw", ["--network"]),
    ("tcl submit --network ", ["bridge", "host", "none"]),
    ("tcl submit --cpu 2 --network b", ["bridge"]),
    ("tcl -o j", ["json"]),
    ("tcl --master h:1 jobs --state PE", ["PENDING"]),
    ("tcl completion ", ["bash", "zsh"]),
    ("tcl node cordon --rea", ["--reason"]),
    ("tcl submit --cpu 1 -- ./ru", ["./run.sh"]),           # after --: the task's command, a file
]


def test_bash_completes_commands_flags_and_choices(bash_file: Path, tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("")
    offered = bash_complete(bash_file, [line for line, _ in CASES], tmp_path)
    assert offered == [expected for _, expected in CASES]


def test_bash_completes_every_flag_of_every_command(bash_file: Path, tmp_path: Path, tree) -> None:  # type: ignore[no-untyped-def]
    commands = tree.walk()
    offered = bash_complete(bash_file, [" ".join(cmd.path) + " -" for cmd in commands], tmp_path)
    for cmd, flags in zip(commands, offered):
        assert flags == sorted(f for opt in cmd.options for f in opt.flags), cmd.name
    assert {c.path[1] for c in commands if len(c.path) == 2} >= set(RUNNABLE)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses_and_completes(tmp_path: Path, tree) -> None:  # type: ignore[no-untyped-def]
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "_tcl").write_text(zsh_script(tree))
    done = subprocess.run(["zsh", "-n", str(functions / "_tcl")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (tmp_path / "run.sh").write_text("")
    for line, expected in [("tcl node ", ["cordon", "drain", "forget", "maint", "uncordon"]),
                           ("tcl submit --network ", ["bridge", "host", "none"]),
                           ("tcl node cordon --rea", ["--reason"]), ("tcl completion ", ["bash", "zsh"])]:
        done = subprocess.run(["zsh", str(ZSH_COMPLETE), str(functions), line], capture_output=True, text=True,
                               cwd=tmp_path, timeout=60)
        assert sorted(done.stdout.split()) == expected, (line, done.stdout, done.stderr)
