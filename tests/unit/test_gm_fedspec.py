"""Issue 35: a raw Submit with what a federated job cannot carry is refused at the GM
naming the field (gm/fedspec.py), not accepted and silently dropped at the LMs."""

from __future__ import annotations

import pytest

from tcluster.gm.service import check_spec
from tcluster.v1 import common_pb2, jobs_pb2


def spec(**kw: object) -> jobs_pb2.JobSpec:
    base = dict(queue="a", tasks=4, command=["true"], resources=common_pb2.Resources(cpu=0.5, memory=2**28))
    return jobs_pb2.JobSpec(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("field, value", [("dependency", "afterok:f0-1"), ("gang", True)])
def test_fields_a_federated_job_cannot_carry_are_refused_naming_them(field: str, value: object) -> None:
    error = check_spec(spec(**{field: value}))
    assert error is not None and error.startswith(f"spec.{field}: a federated job does not support it"), error


def test_what_a_federated_job_carries_passes() -> None:
    assert check_spec(spec(retries=2, time_limit_s=60, stdout_file="/data/out.%j")) is None
    assert check_spec(spec(tasks=1, array="0-3%2")) is None         # gm/fedarray.py
