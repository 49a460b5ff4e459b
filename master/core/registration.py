"""What the master accepts in an agent's Register: a usable name, finite non-negative
capacity, reserved within capacity, bounded labels, ceilings >= 0. Anything else is INVALID_ARGUMENT
naming the field, and nothing is written."""

from __future__ import annotations

import math
import re

from tcluster.domain.bounds import MAX_LABELS, check_count, check_name, quote
from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.actions import Registration
from tcluster.domain.resources import MAX_AMOUNT

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_TASK_ID = re.compile(r"^[0-9a-f]{8}\.[0-9]{1,5}$")
MAX_RUNNING = 100_000
MAX_CEILING = 2**62


def check_registration(reg: Registration) -> None:
    if not _NODE.match(reg.node):
        raise InvalidArgument("register.node", f"{quote(reg.node)} is not a node name; use 1-253 of A-Z a-z 0-9 _ . - "
                              "starting with a letter or digit")
    for field, res in (("capacity", reg.capacity), ("reserved", reg.reserved)):
        for kind, amount in res.as_dict().items():
            if not math.isfinite(amount) or amount < 0 or amount > MAX_AMOUNT:
                raise InvalidArgument(f"register.{field}.{kind[:40]}",
                                      f"{amount!r} must be a finite amount from 0 to {MAX_AMOUNT:g}")
        check_count(f"register.{field}", res.other, 32)
    if reg.capacity.cpu <= 0 or reg.capacity.memory <= 0:
        raise InvalidArgument("register.capacity", "cpu and memory must be > 0")
    if reg.reserved.shortfall(reg.capacity):
        raise InvalidArgument("register.reserved", f"{reg.reserved.describe()} exceeds the capacity "
                              f"{reg.capacity.describe()}")
    check_count("register.labels", reg.labels, MAX_LABELS)
    for key, value in reg.labels:
        check_name("register.labels", key, 63)
        check_name(f"register.labels.{key}", value, 63)
    for field in ("pids_max", "log_max_bytes"):
        value = getattr(reg.ceilings, field)
        if not 0 <= value <= MAX_CEILING:
            raise InvalidArgument(f"register.{field}", f"{value} must be from 0 (not stated) to {MAX_CEILING}")
    check_name("register.runtime", reg.runtime, 63)
    check_count("register.running", reg.running, MAX_RUNNING)
    for task_id, attempt in reg.running:
        if not is_task_id(task_id) or attempt < 0:
            raise InvalidArgument("register.running", f"{quote(task_id)} attempt {attempt} is not a task id JOB.INDEX")


def is_task_id(value: str) -> bool:
    return bool(_TASK_ID.match(value))
