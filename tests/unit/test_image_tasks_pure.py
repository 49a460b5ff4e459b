"""Issue 34's last gaps, pure parts: what `tcl exec` joins in an image task (from the
engine's inspect record), how a job script reaches the container, and the implicit
placement rule that keeps `--mem unlimited` off nodes started with --no-unlimited-memory."""

from __future__ import annotations

import io
import tarfile

import pytest

from tcluster.agent.exectarget import container_target
from tcluster.agent.runtime.dockerspec import CONTAINER_SCRIPT_NAME, container_command, script_archive
from tcluster.domain.constraints import parse_constraint
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import MEMORY_LIMIT_LABEL, JobSpec, node_requirements
from tcluster.domain.nodelabels import admitted
from tcluster.domain.resources import Resources
from tcluster.domain.scripts import SCRIPT_PATH

INFO = {"State": {"Pid": 4242, "Running": True},
        "Config": {"User": "1000:100", "WorkingDir": "/work", "Env": ["PATH=/usr/bin:/bin", "A=b=c"]},
        "HostConfig": {"GroupAdd": ["27", "44"]}}


@pytest.mark.parametrize("info, want", [
    (INFO, {"uid": 1000, "gid": 100, "cwd": "/work", "groups": [27, 44], "task_pid": 4242,
            "env": {"PATH": "/usr/bin:/bin", "A": "b=c"}}),
    # the image's own directory and no groups: "/" and none, as docker exec gives
    ({"State": {"Pid": 7}, "Config": {"User": "65534:65534", "WorkingDir": ""}, "HostConfig": {}},
     {"uid": 65534, "gid": 65534, "cwd": "/", "groups": [], "task_pid": 7, "env": {}}),
])
def test_an_exec_joins_what_the_container_was_created_with(info: dict, want: dict) -> None:
    target = container_target(info, ["/sys/fs/cgroup/memory/x/cgroup.procs", "/sys/fs/cgroup/memory/x/cgroup.procs"])
    assert target["ns"] is True and target["procs"] == ["/sys/fs/cgroup/memory/x/cgroup.procs"]
    assert {k: target[k] for k in want} == want


def test_a_script_is_copied_into_the_container_owned_by_the_task_user() -> None:
    assert container_command(("/bin/sh", SCRIPT_PATH, "a", "b")) == ["/bin/sh", "/" + CONTAINER_SCRIPT_NAME, "a", "b"]
    assert container_command(("echo", "hi")) == ["echo", "hi"]
    with tarfile.open(fileobj=io.BytesIO(script_archive("#!/bin/sh\necho hi\n", 1000, 100))) as tar:
        (entry,) = tar.getmembers()
        assert (entry.name, entry.uid, entry.gid, entry.mode) == (CONTAINER_SCRIPT_NAME, 1000, 100, 0o500)
        assert tar.extractfile(entry).read() == b"#!/bin/sh\necho hi\n"  # type: ignore[union-attr]


def test_output_files_with_an_image_are_refused_naming_why_and_scripts_are_not() -> None:
    JobSpec(("run.sh",), Resources(1, 2**26), image="alpine", script="#!/bin/sh\ntrue\n").validate()
    with pytest.raises(InvalidArgument, match="only its image's filesystem"):
        JobSpec(("x",), Resources(1, 2**26), image="alpine", stderr_file="e").validate()


@pytest.mark.parametrize("memory, labels, placed", [
    (0, {}, True),                                  # unlimited on a node that allows it
    (0, {MEMORY_LIMIT_LABEL: "true"}, False),       # ... not on one that forbids it
    (2**26, {MEMORY_LIMIT_LABEL: "true"}, True),    # a limited request goes anywhere
])
def test_unlimited_memory_is_not_placed_where_the_agent_forbids_it(memory: int, labels: dict, placed: bool) -> None:
    needs = node_requirements(JobSpec(("x",), Resources(1, memory)))
    assert all(parse_constraint(text).holds(labels) for text in needs) is placed


def test_the_memory_limit_label_is_the_agents_own_to_state() -> None:
    assert admitted({MEMORY_LIMIT_LABEL: "true"}, {}) == ({MEMORY_LIMIT_LABEL: "true"}, ())
