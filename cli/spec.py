"""`tcl submit` flags + optional job file -> a validated JobSpec.

Precedence, lowest first: built-in defaults, the job file, then flags. Resources merge
per kind: `--resources` overrides the file's kinds, `--cpu`/`--mem` override both.
"""

from __future__ import annotations

import argparse
from typing import TypeVar

from tcluster.cli.jobfile import JobFile, load_job_file, split_assignment
from tcluster.cli.options import DEFAULT_CPU, DEFAULT_MEMORY
from tcluster.errors import InvalidArgument
from tcluster.model import DEFAULT_QUEUE, JobSpec
from tcluster.resources import CPU, MEMORY, Resources, parse_resource_string
from tcluster.units import parse_bits, parse_bytes, parse_cpu

T = TypeVar("T")
SIZE_HINT = (
    "; sizes look like 512Mi, 0.5GB or 2G (units: B, K/KB, M/MB, G/GB, T/TB in powers of 1000;"
    " Ki/KiB, Mi/MiB, Gi/GiB, Ti/TiB in powers of 1024)"
)


def submission_spec(args: argparse.Namespace) -> JobSpec:
    """Raises InvalidArgument naming the flag, file or field that is wrong."""
    try:
        job_file = load_job_file(args.file) if args.file else JobFile()
        spec = merge_spec(args, job_file)
        spec.validate()
        return spec
    except InvalidArgument as exc:
        raise _with_size_hint(exc) from None


def merge_spec(args: argparse.Namespace, job_file: JobFile) -> JobSpec:
    return JobSpec(
        command=tuple(args.command) or job_file.command or (),
        resources=merge_resources(args, job_file.resources),
        name=_first(args.name, job_file.name, ""),
        queue=_first(args.queue, job_file.queue, DEFAULT_QUEUE),
        tasks=_first(args.tasks, job_file.tasks, 1),
        env=merge_pairs(job_file.env, args.env, "--env"),
        user=_first(args.user, job_file.user, ""),
        workdir=_first(args.workdir, job_file.workdir, ""),
        labels=merge_pairs(job_file.labels, args.label, "--label"),
        # Flags add to the file's constraints: all of them must hold.
        constraints=tuple(job_file.constraints) + tuple(args.constraint or ()),
        weight=_first(getattr(args, "weight", None), job_file.weight, 1.0),
        retries=_first(getattr(args, "retries", None), job_file.retries, 0),
        image=_first(getattr(args, "image", None), job_file.image, ""),
        network=_first(getattr(args, "network", None), job_file.network, ""),
        net_limit=_first(_bits(args, "net_limit", "--net-limit"), job_file.net_limit, 0.0),
        log_max_bytes=_first(_log_max(args), job_file.log_max_bytes, 0),
        request_id=getattr(args, "request_id", None) or "",
        **runtime_limits(args),
    )


def runtime_limits(args: argparse.Namespace) -> dict[str, float | int]:
    """--cpu-limit (cores), --swap (a size, or `unlimited`), --pids-max; absent flags keep the defaults."""
    limits: dict[str, float | int] = {}
    if getattr(args, "cpu_limit", None) is not None:
        limits["cpu_limit"] = parse_cpu(args.cpu_limit, "--cpu-limit")
    swap = getattr(args, "swap", None)
    if swap is not None:
        limits["swap"] = -1 if swap.strip().lower() in ("unlimited", "max", "-1") else parse_bytes(swap, "--swap")
    if getattr(args, "pids_max", None) is not None:
        limits["pids_max"] = args.pids_max
    return limits


def _bits(args: argparse.Namespace, attr: str, flag: str) -> float | None:
    text = getattr(args, attr, None)
    return None if text is None else parse_bits(text, flag)


def _log_max(args: argparse.Namespace) -> int | None:
    text = getattr(args, "log_max", None)
    return None if text is None else parse_bytes(text, "--log-max")


def merge_resources(args: argparse.Namespace, from_file: Resources | None) -> Resources:
    amounts: dict[str, float] = {CPU: parse_cpu(DEFAULT_CPU), MEMORY: float(parse_bytes(DEFAULT_MEMORY))}
    from_flag = parse_resource_string(args.resources, "--resources") if args.resources else None
    for layer in (from_file, from_flag):
        if layer is not None:
            amounts.update({kind: amount for kind, amount in layer.as_dict().items() if amount})
    if args.cpu is not None:
        amounts[CPU] = parse_cpu(args.cpu, "--cpu")
    if args.mem is not None:
        amounts[MEMORY] = float(parse_bytes(args.mem, "--mem"))
    if getattr(args, "net", None) is not None:
        amounts["net"] = parse_bits(args.net, "--net")
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
