"""`tcl completion bash|zsh`: a completion script generated from tcl's parsers (cli/parsertree.py).

The script is static (no Python runs on Tab): tables of each command path's subcommands,
options, the options that take a value and their choices. Subcommands, flags and choices
complete; a value without choices completes as a file name; after `--` (the task's command)
file names too. The package installs both scripts (packaging/build_deb.py); by hand:
`tcl completion bash > ~/.local/share/bash-completion/completions/tcl`.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys

from tcluster.cli.parsertree import PROGRAMS, Command, Option

SHELLS = ("bash", "zsh")


def bash_script(root: Command) -> str:
    """bash (4+, associative arrays) completion for root's program and every subcommand."""
    fn = "_" + _ident(root.name)
    tables: dict[str, dict[str, str]] = {"commands": {}, "options": {}, "valued": {}, "choices": {}}
    for cmd in root.walk():
        key = cmd.name          # bash has no empty key: the root's is the program's name
        tables["commands"][key] = " ".join(sub.path[-1] for sub in cmd.subcommands)
        tables["options"][key] = " ".join(flag for opt in cmd.options for flag in opt.flags)
        tables["valued"][key] = " ".join(flag for opt in cmd.options if opt.takes_value for flag in opt.flags)
        for opt in cmd.options:
            for flag in opt.flags:
                if opt.choices:
                    tables["choices"][f"{key}|{flag}"] = " ".join(opt.choices)
        for pos in cmd.positionals:
            if pos.choices:     # e.g. `tcl completion SHELL`: completes like a subcommand
                tables["commands"][key] = " ".join(filter(None, (tables["commands"][key], *pos.choices)))
    lines = [f"# {root.name} completion for bash, generated from its parsers by `tcl completion bash`.", ""]
    for table, entries in tables.items():
        lines.append(f"declare -gA {fn}_{table}=(")
        lines += [f"  [{shlex.quote(k)}]={shlex.quote(v)}" for k, v in entries.items()]
        lines.append(")")
    lines.append(BASH_FUNCTION.replace("_FN_", fn).replace("_PROG_", shlex.quote(root.name)))
    lines.append(f"complete -o bashdefault -o default -F {fn} {root.name}")
    return "\n".join(lines) + "\n"


BASH_FUNCTION = r"""
_FN_() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=_PROG_ w i skip=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if ((skip)); then skip=0; continue; fi
    case $w in
      --) COMPREPLY=($(compgen -f -- "$cur")); return ;;   # the task's command: files
      =) continue ;;
      -*) [[ $w != *=* && " ${_FN__valued[$key]} " == *" $w "* && ${COMP_WORDS[i+1]} != = ]] && skip=1
          continue ;;
    esac
    if [[ " ${_FN__commands[$key]} " == *" $w "* ]]; then key="$key $w"; fi
  done
  local opt=$prev
  if [[ $prev == = ]]; then opt=${COMP_WORDS[COMP_CWORD-2]}; fi     # --output=js: '=' is its own word
  if [[ $cur == --*=* ]]; then opt=${cur%%=*}; cur=${cur#*=}; fi
  if [[ " ${_FN__valued[$key]} " == *" $opt "* ]]; then
    local choices=${_FN__choices[$key|$opt]}
    if [[ -n $choices ]]; then COMPREPLY=($(compgen -W "$choices" -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
    return
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${_FN__options[$key]}" -- "$cur"))
  elif [[ -n ${_FN__commands[$key]} ]]; then
    COMPREPLY=($(compgen -W "${_FN__commands[$key]}" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}"""


def zsh_script(root: Command) -> str:
    """zsh completion (`_arguments`, with each flag's and subcommand's help) for root's program."""
    lines = [f"#compdef {root.name}", f"# {root.name} completion for zsh, generated from its parsers by "
             "`tcl completion zsh`.", ""]
    for cmd in root.walk():
        lines += _zsh_function(cmd)
    lines += ["", f'_{_ident(root.name)} "$@"']
    return "\n".join(lines) + "\n"


def _zsh_function(cmd: Command) -> list[str]:
    fn = "_" + _ident(cmd.name)
    specs = [spec for opt in cmd.options for spec in _zsh_option_specs(opt)]
    if cmd.subcommands:
        specs += ["'1: :->command'", "'*:: :->argument'"]
    else:
        specs += _zsh_positional_specs(cmd)
    out = [f"{fn}() {{", "  local context state state_descr line curcontext=$curcontext", "  typeset -A opt_args"]
    out.append("  _arguments -S -C \\")
    out += [f"    {spec} \\" for spec in specs]
    out.append("    && return 0")
    if cmd.subcommands:
        described = " ".join(_zsh_quote(f"{sub.path[-1]}:{_first_line(sub.help)}") for sub in cmd.subcommands)
        out += ["  case $state in",
                f"    command) local -a commands=({described}); _describe -t commands '{cmd.name} command' commands ;;",
                f'    argument) local sub="{fn}_${{words[1]//-/_}}"; (( $+functions[$sub] )) && $sub ;;',
                "  esac"]
    out += ["}", ""]
    return out


def _zsh_option_specs(opt: Option) -> list[str]:
    exclusive = "" if opt.repeatable or len(opt.flags) == 1 else "(" + " ".join(opt.flags) + ")"
    star = "*" if opt.repeatable else ""
    value = ""
    if opt.takes_value:
        action = "(" + " ".join(_zsh_escape(c) for c in opt.choices) + ")" if opt.choices else "_files"
        value = f":{_zsh_escape(opt.metavar or 'value')}:{action}"
    specs = []
    for flag in opt.flags:
        suffix = ("=" if flag.startswith("--") else "+") if opt.takes_value else ""
        specs.append(_zsh_quote(f"{exclusive}{star}{flag}{suffix}[{_zsh_escape(_first_line(opt.help))}]{value}"))
    return specs


def _zsh_positional_specs(cmd: Command) -> list[str]:
    specs = []
    for number, pos in enumerate(cmd.positionals, start=1):
        action = "(" + " ".join(_zsh_escape(c) for c in pos.choices) + ")" if pos.choices else "_files"
        specs.append(_zsh_quote(f"{'*' if pos.many else number}:{_zsh_escape(pos.name)}:{action}"))
        if pos.many:
            return specs
    return specs + ["'*:file:_files'"]      # what argparse.REMAINDER-less commands still take after --


def _first_line(text: str) -> str:
    return " ".join(text.split())[:100]


def _zsh_escape(text: str) -> str:
    """Inside an _arguments spec: brackets and colons end fields, so they are escaped."""
    return re.sub(r"([\\\[\]:])", r"\\\1", text)


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name)


def script(shell: str, program: str = "tcl") -> str:
    tree = PROGRAMS[program][1]()
    return bash_script(tree) if shell == "bash" else zsh_script(tree)


def completion(args: argparse.Namespace) -> int:
    """`tcl completion SHELL [PROGRAM]`."""
    program = getattr(args, "program", "tcl")
    if program not in PROGRAMS:
        print(f"error: program: {program!r} is not one of {', '.join(PROGRAMS)}", file=sys.stderr)
        return 2
    sys.stdout.write(script(args.shell, program))
    return 0


if __name__ == "__main__":      # python -m tcluster.cli.completion bash [PROGRAM]: what packaging installs
    sys.stdout.write(script(sys.argv[1], *sys.argv[2:3]))
