"""`tcl submit run.sh`: #TCL and #SBATCH directives, their precedence under the command
line, the script's interpreter and its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from tcluster.cli.directives import read_directives
from tcluster.cli.main import build_parser
from tcluster.cli.spec import submission_spec
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec
from tcluster.domain.scripts import MAX_SCRIPT_BYTES, SCRIPT_PATH, interpreter, script_argv

MI = 1024**2


def words(text: str) -> list[tuple[int, tuple[str, ...]]]:
    return [(d.line, d.words) for d in read_directives(text)]


@pytest.mark.parametrize(("line", "expected"), [
    ("#TCL --cpu 2 --mem 4G --array 0-9", ("--cpu", "2", "--mem", "4G", "--array", "0-9")),
    ("#TCL --env 'A=two words'  # a comment", ("--env", "A=two words")),
    ("#SBATCH --job-name=train", ("--name", "train")),
    ("#SBATCH -J train -p ads.prod", ("--name", "train", "--queue", "ads.prod")),
    ("#SBATCH -c4 --cpus-per-task 2", ("--cpu", "4", "--cpu", "2")),
    ("#SBATCH --mem=4096", ("--mem", "4096Mi")),      # Slurm: a bare number is MiB
    ("#SBATCH --mem 4G", ("--mem", "4Gi")),           # Slurm: G is 2^30
    ("#SBATCH --mem=1.5g", ("--mem", "1.5Gi")),
    ("#SBATCH -t 90", ("--time-limit", "90m")),       # Slurm: a bare number is minutes
    ("#SBATCH --time=1-00:00:00", ("--time-limit", "1-00:00:00")),
    ("#SBATCH --array=0-99%10 -o out-%A_%a.txt -e err-%j.txt",
     ("--array", "0-99%10", "--stdout-file", "out-%A_%a.txt", "--stderr-file", "err-%j.txt")),
    ("#SBATCH --output out.txt --error=err.txt --open-mode=append",
     ("--stdout-file", "out.txt", "--stderr-file", "err.txt", "--open-mode", "append")),
    ("#SBATCH -D /srv/run --chdir=/srv", ("--workdir", "/srv/run", "--workdir", "/srv")),
    ("#SBATCH --dependency=afterok:ab12", ("--dependency", "afterok:ab12")),
    ("#SBATCH --gres=gpu:2", ("--gpus", "2")),
    ("#SBATCH --gres gpu", ("--gpus", "1")),
    ("#SBATCH -G 1", ("--gpus", "1")),
    ("#SBATCH --export=NONE", ("--export", "NONE")),
])
def test_directives_become_tcl_submit_flags(line: str, expected: tuple[str, ...]) -> None:
    assert words(f"#!/bin/sh\n{line}\necho\n") == [(2, expected)]


def test_directives_stop_at_the_first_command_as_sbatch_s_do() -> None:
    text = "#!/bin/bash\n\n# setup\n#SBATCH -J a\n   \n#TCL --cpu 1\nmodule load x\n#SBATCH -J b\n#TCL --cpu 9\n"
    assert words(text) == [(4, ("--name", "a")), (6, ("--cpu", "1"))]
    assert words("echo first\n#SBATCH -J a\n") == []
    assert words("#SBATCHED -J a\n#TCLX --cpu 1\n") == []           # other comments, not directives


@pytest.mark.parametrize(("line", "parts"), [
    ("#SBATCH --mail-type=END", ["line 2", "--mail-type", "not supported", "--job-name"]),
    ("#SBATCH -J ok --account proj", ["line 2", "--account"]),
    ("#SBATCH -n 4", ["line 2", "-n", "--tasks N"]),
    ("#SBATCH --ntasks=4", ["--ntasks", "runs once for all its tasks"]),
    ("#SBATCH --nodes=2", ["--nodes", "--gang"]),
    ("#SBATCH --gres=gpu:a100:2", ["--gres", "gpu[:N]"]),
    ("#SBATCH --gres=license:1", ["--gres"]),
    ("#SBATCH -J", ["-J needs a value"]),
    ("#SBATCH train", ["expects flags"]),
    ("#SBATCH -J 'unclosed", ["cannot split"]),
    ("#TCL -- python3 x.py", ["a #TCL line holds"]),
    ("#TCL python3", ["a #TCL line holds"]),
    ("#TCL --cpu 1 -o out.txt", ["-o in a #TCL line", "--stdout-file"]),
    ("#TCL --error=e.txt", ["--error in a #TCL line"]),
])
def test_refused_directives_name_the_flag_and_the_line(line: str, parts: list[str]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        read_directives(f"#!/bin/sh\n{line}\n")
    for part in parts:
        assert part in str(caught.value)


_value = st.text(st.characters(blacklist_characters="\x00\n\r", blacklist_categories=("Cs", "Zl", "Zp")), min_size=1,
                 max_size=12).filter(lambda v: v.partition("=")[0] not in ("-o", "-e", "--output", "--error"))


@given(st.lists(st.tuples(st.sampled_from(["--cpu", "--mem", "--env", "--name", "--array"]), _value),
                min_size=1, max_size=4))
def test_a_tcl_line_gives_back_the_words_it_was_written_from(pairs: list[tuple[str, str]]) -> None:
    import shlex
    flags = [word for pair in pairs for word in pair]
    assert words(f"#!/bin/sh\n#TCL {shlex.join(flags)}\nrun\n") == [(2, tuple(flags))]


@given(st.text(alphabet=st.sampled_from("ab #-=\n\t'\"xSBATCHTCL"), max_size=80))
def test_the_reader_returns_directives_or_refuses_naming_the_line_for_any_text(text: str) -> None:
    try:
        found = read_directives(text)
    except InvalidArgument as exc:
        assert str(exc).startswith("line ")
        return
    lines = text.split("\n")
    assert all(lines[d.line - 1].strip().startswith(("#TCL", "#SBATCH")) for d in found)


def submit(tmp_path: Path, script: str, *flags: str, dashdash: bool = False) -> JobSpec:
    path = tmp_path / "run.sh"
    path.write_text(script)
    argv = ["submit", *flags, *(["--"] if dashdash else []), str(path), "x1"]
    args = build_parser(argv).parse_args(argv)
    args.dashdash = dashdash
    return submission_spec(args, environ={}, cwd=str(tmp_path))    # --export ALL of an empty shell


SCRIPT = "#!/bin/bash\n#TCL --cpu 2 --mem 256Mi --env A=1 --label t=s\n#SBATCH -J fromscript -o o-%j --mem=128\necho\n"


def test_the_command_line_wins_over_directives_and_lists_add(tmp_path: Path) -> None:
    spec = submit(tmp_path, SCRIPT, "--cpu", "0.5", "--env", "B=2", "--name", "cli")
    assert (spec.resources.cpu, spec.resources.memory) == (0.5, 128 * MI)     # the later #SBATCH over #TCL
    assert (spec.name, spec.stdout_file, spec.env) == ("cli", "o-%j", (("A", "1"), ("B", "2")))
    assert spec.labels == (("t", "s"),)
    assert spec.script == SCRIPT and spec.command == (str(tmp_path / "run.sh"), "x1")


def test_a_script_names_its_job_and_double_dash_runs_the_file_as_a_command(tmp_path: Path) -> None:
    assert submit(tmp_path, "#!/bin/sh\necho\n").name == "run.sh"       # Slurm's default job name
    spec = submit(tmp_path, SCRIPT, dashdash=True)
    assert (spec.script, spec.name, spec.resources.cpu) == ("", "", 1.0)


def test_a_bad_directive_value_names_the_script_and_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"run.sh: line 2: .*--tasks"):
        submit(tmp_path, "#!/bin/sh\n#TCL --tasks many\n")
    with pytest.raises(InvalidArgument, match=r"run.sh: line 3: .*unrecognized arguments: --nope"):
        submit(tmp_path, "#!/bin/sh\n\n#TCL --nope\n")


def test_scripts_are_bounded_text(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="larger than 512 KiB"):
        submit(tmp_path, "#!/bin/sh\n" + "#" * MAX_SCRIPT_BYTES)
    with pytest.raises(InvalidArgument, match="NUL"):
        submit(tmp_path, "#!/bin/sh\necho \x00\n")


@pytest.mark.parametrize(("first", "argv"), [
    ("#!/bin/bash", ("/bin/bash",)),
    ("#!/usr/bin/env python3", ("/usr/bin/env", "python3")),
    ("#! /bin/sh -e -x", ("/bin/sh", "-e -x")),          # the kernel passes one argument
    ("echo no shebang", ("/bin/sh",)),
])
def test_a_script_runs_by_its_interpreter(first: str, argv: tuple[str, ...]) -> None:
    assert interpreter(first + "\necho\n") == argv
    assert script_argv(first + "\n", ("run.sh", "a", "b")) == (*argv, SCRIPT_PATH, "a", "b")


def test_a_relative_interpreter_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="absolute interpreter"):
        interpreter("#!bash\n")


def test_tcl_status_names_the_script_and_the_output_files() -> None:
    from tcluster.cli.tables import output_lines
    from tcluster.v1 import jobs_pb2
    spec = jobs_pb2.JobSpec(script="#!/bin/bash\n#TCL --cpu 1\necho\n", stdout_file="out-%j.txt", open_mode="append")
    assert output_lines(spec) == [("Script", "3 lines, run by /bin/bash (-o json shows it)"),
                                  ("Stdout", "out-%j.txt (append)"), ("Stderr", "with stdout")]
    hidden = jobs_pb2.JobSpec(script="<redacted>", stderr_file="err.txt")
    assert output_lines(hidden) == [("Script", "(only its owner and admins see it)"),
                                    ("Stdout", "the agent's log (tcl logs)"), ("Stderr", "err.txt")]
    assert output_lines(jobs_pb2.JobSpec()) == []


def test_a_federated_submit_refuses_a_script(tmp_path: Path) -> None:
    from tcluster.cli.federation import federated_spec
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/sh\n#TCL --cpu 1\necho\n")
    argv = ["submit", str(path)]
    args = build_parser(argv).parse_args(argv)
    args.dashdash = False
    with pytest.raises(InvalidArgument, match="not a job script"):
        federated_spec(args)
