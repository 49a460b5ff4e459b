"""`tcl submit` flags + optional job file -> a validated JobSpec.

Precedence, lowest first: built-in defaults, the job file, then flags. Resources merge
per kind: `--resources` overrides the file's kinds, `--cpu`/`--mem` override both.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields, replace
from typing import Any, Callable, Mapping, TypeVar

from tcluster.cli.export import exported_env
from tcluster.cli.jobfile import JobFile, load_job_file, split_assignment
from tcluster.cli.scriptjob import with_script
from tcluster.cli.options import DEFAULT_CPU, DEFAULT_MEMORY
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import CPU, GPU, MEMORY, Resources, parse_resource_string
from tcluster.domain.specfields import SPEC_FIELDS, Kind, SpecField
from tcluster.domain.slurmunits import MEMORY_HINT, UNLIMITED_MARK, parse_memory, parse_time_limit
from tcluster.domain.units import parse_bits, parse_bytes, parse_cpu, parse_duration
from tcluster.wire.codec import check_spec

T = TypeVar("T")
SIZE_HINT = f"; {MEMORY_HINT}"


def submission_spec(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
                    cwd: str | None = None) -> JobSpec:
    """Raises InvalidArgument naming the flag, file or field that is wrong. `environ` and
    `cwd` are the submitting shell's (default: this process's): --export's variables and
    the default working directory."""
    try:
        args = with_script(args)        # `tcl submit run.sh`: its directives under the flags
        job_file = load_job_file(args.file) if args.file else JobFile()
        spec = replace(merge_spec(args, job_file), script=getattr(args, "script_text", ""))
        environ = os.environ if environ is None else environ
        exported = exported_env(getattr(args, "export", None), environ)
        spec = replace(spec, env=tuple(sorted({**dict(exported), **dict(spec.env)}.items())),
                       submit_dir=submit_directory(environ) if cwd is None else cwd)
        check_spec(spec)    # the master's own check, run early for a message before any RPC
        return spec
    except InvalidArgument as exc:
        raise _with_size_hint(exc) from None


def submit_directory(environ: Mapping[str, str]) -> str:
    """The shell's directory as the user sees it: $PWD when it is this very directory (it
    keeps a symlinked path, such as /home -> /mnt/home, that other nodes share), else the
    resolved one; "" when it is gone (the task then starts in its private /tmp)."""
    try:
        here = os.getcwd()
    except OSError:
        return ""
    pwd = environ.get("PWD", "")
    try:
        if pwd.startswith("/") and os.path.samefile(pwd, here):
            return pwd
    except OSError:
        pass
    return here


def merge_spec(args: argparse.Namespace, job_file: JobFile) -> JobSpec:
    """Field by field, from the table: the flag, else the file, else the JobSpec default."""
    spec = JobSpec(**{entry.name: _merge_field(entry, args, job_file) for entry in SPEC_FIELDS
                      if entry.flag is not None or entry.file_key is not None})
    return replace(spec, dependency=join_dependencies(spec.dependency, args))


def join_dependencies(given: str, args: argparse.Namespace) -> str:
    """--after-ok/--after-any/--after-notok J[,J...] added to --dependency (all must hold)."""
    parts = [given] if given else []
    for flag, kind in (("after_ok", "afterok"), ("after_any", "afterany"), ("after_notok", "afternotok")):
        jobs = [j.strip() for value in getattr(args, flag, None) or () for j in value.split(",") if j.strip()]
        if jobs:
            parts.append(":".join([kind, *jobs]))
    return ",".join(parts)


def _merge_field(entry: SpecField, args: argparse.Namespace, job_file: JobFile) -> Any:
    from_file = job_file.get(entry.name)
    if entry.kind is Kind.RESOURCES:
        return merge_resources(args, from_file)
    if entry.kind is Kind.ARGV:
        return tuple(args.command) or from_file or ()
    # getattr: a field with a file key alone has no flag (and callers may build partial args).
    given = getattr(args, entry.dest, None) if entry.flag is not None else None
    if entry.kind is Kind.PAIRS:
        return merge_pairs(from_file or (), given, entry.flag or entry.name)
    if entry.kind is Kind.LIST:
        return tuple(from_file or ()) + tuple(given or ())     # flags add to the file's: all must hold
    flag_value = None if given is None else _FLAG_PARSERS.get(entry.kind, _as_given)(given, entry.flag or "")
    return _first(flag_value, from_file, _DEFAULTS[entry.name])


def _parse_swap(text: str, flag: str) -> int:
    return -1 if text.strip().lower() in ("unlimited", "max", "-1") else parse_bytes(text, flag)


def _as_given(value: T, flag: str) -> T:
    return value


# Flags argparse leaves as text (cli/submitflags.py), parsed here so errors name the flag.
_FLAG_PARSERS: dict[Kind, Callable[[str, str], Any]] = {
    Kind.DURATION: parse_duration,
    Kind.TIME_LIMIT: parse_time_limit,
    Kind.CORES: parse_cpu,
    Kind.SIZE: parse_bytes,
    Kind.RATE: parse_bits,
    Kind.SWAP: _parse_swap,
}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(JobSpec)}


def merge_resources(args: argparse.Namespace, from_file: Resources | None) -> Resources:
    amounts: dict[str, float] = {CPU: parse_cpu(DEFAULT_CPU), MEMORY: float(parse_memory(DEFAULT_MEMORY))}
    from_flag = parse_resource_string(args.resources, "--resources", request=True) if args.resources else None
    for layer in (from_file, from_flag):
        if layer is not None:
            amounts.update({kind: amount for kind, amount in layer.as_dict().items() if amount})
    if args.cpu is not None:
        amounts[CPU] = parse_cpu(args.cpu, "--cpu")
    if args.mem is not None:
        amounts[MEMORY] = float(parse_memory(args.mem, "--mem"))
    if amounts[MEMORY] == UNLIMITED_MARK:      # `memory: unlimited` in the file or --resources
        amounts[MEMORY] = 0.0
    if getattr(args, "net", None) is not None:
        amounts["net"] = parse_bits(args.net, "--net")
    if getattr(args, "gpus", None) is not None:
        amounts[GPU] = float(args.gpus)
    return Resources.of(amounts)


def merge_pairs(
    base: tuple[tuple[str, str], ...], assignments: list[str] | None, flag: str,
) -> tuple[tuple[str, str], ...]:
    """File pairs overridden key by key by repeated `flag K=V` options."""
    merged = dict(base)
    for text in assignments or ():
        key, value = split_assignment(text, flag)
        merged[key] = value
    return tuple(sorted(merged.items()))


def _first(*candidates: T | None) -> T:
    """The first candidate that is not None (flags, then file, then the default)."""
    return next(value for value in candidates if value is not None)


def _with_size_hint(exc: InvalidArgument) -> InvalidArgument:
    # units.parse_bytes lists the units only for a bad unit, not for text like "lots";
    # a user who typed a bad size always wants to see what a good one looks like.
    text = str(exc)
    if "cannot parse" in text and ("memory" in text or "--mem" in text):
        exc.args = (text + SIZE_HINT,)
    return exc
