"""Hypothesis strategies for domain values, shared by the codec and store tests. Every
JobSpec field gets its own strategy: a field added to JobSpec without one fails
test_every_field_has_a_strategy, so the round-trip properties always cover all fields."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import strategies as st

from tcluster.domain.model import JobSpec, TaskUsage
from tcluster.domain.resources import Resources

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
_word = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,10}", fullmatch=True)
_finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)

resources = st.builds(
    lambda cpu, mem, other: Resources.of({"cpu": cpu, "memory": mem, **other}),
    _finite, st.integers(0, 2**40), st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
                                                     .filter(lambda k: k not in ("cpu", "memory")), _finite, max_size=3),
)

SPEC_FIELDS = {
    "command": st.lists(_text, min_size=1, max_size=5).map(tuple),
    "resources": resources,
    "name": _word,
    "queue": st.from_regex(r"[a-z]+(\.[a-z]+){0,2}", fullmatch=True),
    "tasks": st.integers(1, 10_000),
    # env and labels are maps: canonical as sorted pairs with unique keys
    "env": st.dictionaries(_word, _text, max_size=4).map(lambda d: tuple(sorted(d.items()))),
    "user": _word | st.just(""),
    "owner": _word | st.just(""),
    "workdir": st.just("") | st.from_regex(r"/[a-z]{1,8}", fullmatch=True),
    "submit_dir": st.just("") | st.from_regex(r"/[a-z]{1,8}(/[a-z .]{1,8})?", fullmatch=True),
    "labels": st.dictionaries(_word, _word, max_size=3).map(lambda d: tuple(sorted(d.items()))),
    "constraints": st.lists(st.sampled_from(["rack=r1", "disk!=hdd", "has gpu", "arch in (x86_64,arm64)"]),
                            max_size=3).map(tuple),
    "weight": st.floats(min_value=0.01, max_value=100, allow_nan=False),
    "cpu_limit": _finite,
    "swap": st.integers(-1, 2**40),
    "pids_max": st.integers(0, 2**20),
    "retries": st.integers(0, 100),
    "log_max_bytes": st.integers(0, 2**40),
    "image": st.sampled_from(["", "busybox:local", "registry.example/x/y:1.2"]),
    "network": st.sampled_from(["", "host", "none", "bridge"]),
    "on_preempt": st.sampled_from(["", "requeue", "cancel"]),
    "time_limit_s": st.sampled_from([0.0, 3.0, 7200.0]),
    "array": st.sampled_from(["", "0-9", "1,3,5-7%2", "0-99:2"]),
    "dependency": st.sampled_from(["", "afterok:0123abcd", "afterok:0123abcd:89abcdef,afterany:01234567"]),
    "keep_unmet": st.booleans(),
    "gang": st.booleans(),
    "gang_timeout_s": st.sampled_from([0.0, 60.0]),
    "gang_restart": st.booleans(),
    "net_limit": _finite,
    "request_id": st.just("") | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", fullmatch=True),
    "stdout_file": st.sampled_from(["", "out-%j-%t.txt", "/home/%u/%x.%4a"]),
    "stderr_file": st.sampled_from(["", "err-%A_%a.txt", "100%%"]),
    "open_mode": st.sampled_from(["", "truncate", "append"]),
    "script": st.just("") | _text.map(lambda body: "#!/bin/sh\n#TCL --cpu 1\n" + body),
}

job_specs = st.builds(JobSpec, **SPEC_FIELDS)
usages = st.builds(TaskUsage, **{f.name: (_finite if f.type in ("float", float) else st.integers(0, 2**40))
                                 for f in fields(TaskUsage)})
