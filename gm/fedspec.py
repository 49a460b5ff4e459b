"""Issue 35: what a federated job cannot carry, refused at the GM's Submit naming the field
(`tcl --federation submit` refuses the flags already; this covers a raw gRPC client). The
LM runs each task as a one-task job without these, so accepting them would silently drop
them: a dependency, a gang (an array is one federated task per index: gm/fedarray.py)."""

from __future__ import annotations

from tcluster.v1 import jobs_pb2


def unsupported_field(spec: jobs_pb2.JobSpec) -> str | None:
    """The error for the first field set that a federated job does not support; None: none."""
    # An array is supported (issue 35, gm/fedarray.py): each index is one federated task.
    for field, given in (("dependency", bool(spec.dependency)), ("gang", spec.gang)):
        if given:
            return (f"spec.{field}: a federated job does not support it (each task runs as a one-task job "
                    "of its cluster); drop it, or submit to a master without --federation")
    return None
