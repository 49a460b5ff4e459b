"""Man pages generated from the parsers (cli/parsertree.py): tcl(1) with every subcommand,
tcl-master(8), tcl-agent(8) and tcl-gm(8), as roff (the man(7) macros).

    python -m tcluster.cli.manpages OUTDIR [VERSION]   # writes OUTDIR/tcl.1, OUTDIR/tcl-master.8, ...

packaging/build_deb.py installs them gzipped under /usr/share/man. The text is each
parser's own (description, option help, epilog), so `--help` and the page never disagree.
The output is deterministic (no date): the same tree makes the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tcluster.cli.parsertree import PROGRAMS, Command, Option, Positional

SUMMARIES = {
    "tcl": "tcluster command-line client: submit, inspect and manage jobs",
    "tcl-master": "tcluster master: schedules jobs fairly onto the agents' nodes",
    "tcl-agent": "tcluster agent: runs tasks in cgroup containers on one node",
    "tcl-gm": "tcluster federation global manager (Megha) over several clusters",
}
# What every page ends with, per program: (section title, paragraphs).
TAILS: dict[str, list[tuple[str, str]]] = {
    "tcl": [("EXIT STATUS", "0 success; 1 the master refused or failed (or a waited-for job did not succeed); "
                            "2 a usage error (bad flags, sizes, job files)."),
            ("ENVIRONMENT", "TCL_MASTER: the master(s) to talk to. TCL_TOKEN and TCL_CA (a PEM file): a user "
                            "token and the cluster CA, over what `tcl login` stored. TCL_WAIT_LEADER_S: how long "
                            "to wait for an HA leader. TCL_FEDERATION and TCL_FEDERATION_TLS: the global managers "
                            "of a federation and their TLS directory. XDG_CONFIG_HOME: where `tcl login` keeps "
                            "tcluster/credentials.json."),
            ("NOTES", "Coming from Slurm: /opt/tcluster/docs/from-slurm.md (docs/from-slurm.md in the source) "
                      "maps sbatch, srun, squeue, scancel, sacct, sreport, scontrol and sinfo to tcl.")],
    "tcl-master": [("FILES", "/etc/tcluster/master.toml (--config), /var/lib/tcluster/master (--data-dir).")],
    "tcl-agent": [("FILES", "/etc/tcluster/agent.toml (--config), /var/lib/tcluster/agent (--state-dir).")],
    "tcl-gm": [("FILES", "--config FILE: a TOML file with the flags' names as keys.")],
}


def roff_text(text: str) -> str:
    """Plain text made safe for roff: backslashes and dashes escaped, no line read as a request."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in out.split("\n"))


def paragraphs(text: str) -> list[str]:
    """A parser's description or epilog as roff: flowing lines joined into paragraphs, indented
    lines (examples) kept as they are."""
    out: list[str] = []
    prose: list[str] = []
    literal: list[str] = []

    def flush() -> None:
        if prose:
            out.extend([".PP", roff_text(" ".join(prose))])
            prose.clear()
        if literal:
            out.extend([".PP", ".RS 4", ".nf", *(roff_text(line) for line in literal), ".fi", ".RE"])
            literal.clear()

    for line in text.split("\n"):
        if not line.strip():
            flush()
        elif line.startswith((" ", "\t")):
            if prose:
                flush()
            literal.append(line.strip())
        else:
            if literal:
                flush()
            prose.append(line.strip())
    flush()
    return out


def option_entry(opt: Option) -> list[str]:
    flags = ", ".join(f"\\fB{roff_text(flag)}\\fR" for flag in opt.flags)
    value = f" \\fI{roff_text(opt.metavar)}\\fR" if opt.takes_value else ""
    text = opt.help or ""
    if opt.choices:
        text += f" (one of: {', '.join(opt.choices)})"
    return [".TP", flags + value, roff_text(" ".join(text.split())) or "\\&"]


def positional_entry(pos: Positional) -> list[str]:
    text = pos.help + (f" (one of: {', '.join(pos.choices)})" if pos.choices else "")
    return [".TP", f"\\fI{roff_text(pos.name)}\\fR", roff_text(" ".join(text.split())) or "\\&"]


def arguments(cmd: Command) -> list[str]:
    lines = [line for pos in cmd.positionals for line in positional_entry(pos)]
    return lines + [line for opt in cmd.options for line in option_entry(opt)]


def command_section(cmd: Command) -> list[str]:
    """One subcommand: its usage, what it does, its arguments and options."""
    lines = [f'.SS "{roff_text(cmd.name)}"']
    if cmd.help:
        lines += [roff_text(" ".join(cmd.help.split()))]
    lines += [".PP", ".nf", roff_text(cmd.usage), ".fi"]
    lines += paragraphs(cmd.description)
    lines += arguments(cmd)
    lines += paragraphs(cmd.epilog)
    return lines


def man_page(root: Command, section: int, version: str) -> str:
    name = root.name
    lines = [f'.TH "{name.upper()}" "{section}" "" "tcluster {version}" "tcluster manual"',
             ".SH NAME", f"{roff_text(name)} \\- {roff_text(SUMMARIES.get(name, root.description))}",
             ".SH SYNOPSIS", ".nf", roff_text(root.usage), ".fi",
             ".SH DESCRIPTION", *paragraphs(root.description)]
    if root.options or root.positionals:
        lines += [".SH OPTIONS", *arguments(root)]
    commands = root.walk()[1:]
    if commands:
        lines += [".SH COMMANDS", *(line for cmd in commands for line in command_section(cmd))]
    lines += paragraphs(root.epilog)
    for title, text in TAILS.get(name, []):
        lines += [f".SH {title}", roff_text(text)]
    others = sorted(f"\\fB{roff_text(p)}\\fR({s})" for p, (s, _) in PROGRAMS.items() if p != name)
    lines += [".SH SEE ALSO", ", ".join(others)]
    return "\n".join(lines) + "\n"


def write_pages(out_dir: Path, version: str = "") -> list[Path]:
    from tcluster import __version__
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for program, (section, tree) in PROGRAMS.items():
        path = out_dir / f"{program}.{section}"
        path.write_text(man_page(tree(), section, version or __version__))
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m tcluster.cli.manpages OUTDIR [VERSION]")
    for page in write_pages(Path(sys.argv[1]), *sys.argv[2:3]):
        print(page)
