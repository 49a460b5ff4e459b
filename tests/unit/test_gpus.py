"""GPUs on the agent, the pure parts: `--gpus` forms, device selection, labels, the
allocator in the task state machine, the device rules (v1 lines and the v2 BPF program,
run here through a small interpreter of the instructions it uses)."""

from __future__ import annotations

import struct

import pytest

from tcluster.agent.gpus import (
    NONE, Gpu, Selection, node_labels, parse_selection, pick, requested, select, short_model, visible_env,
)
from tcluster.agent.launchrecord import load_gpus, load_record, save_record
from tcluster.agent.outbox import report_from_json, report_to_json
from tcluster.agent.runtime import devbpf
from tcluster.agent.runtime.base import ExitStatus
from tcluster.agent.runtime.devices import STANDARD, allows, task_rules, v1_device_limits
from tcluster.agent.taskstate import (
    Adopted, AgentTasks, Exited, KillAsked, LaunchAsked, Launched, LaunchFailed, Report, StartContainer,
)
from tcluster.cli.jobfile import parse_job_file
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec, TaskState
from tcluster.domain.reports import TaskReport
from tcluster.domain.resources import Resources, parse_resource_string

FOUR = tuple(Gpu(i, f"/dev/nvidia{i}", 195, i) for i in range(4))


# ---- --gpus ----

@pytest.mark.parametrize("text, want", [
    ("all", Selection(all=True)), ("ALL", Selection(all=True)), ("2", Selection(count=2)), ("0", NONE),
    ("none", NONE), ("", NONE), (None, NONE), ("0,2", Selection(indices=(0, 2))), ("2,0", Selection(indices=(0, 2))),
    ("3,", Selection(indices=(3,))), (" 1 , 3 ", Selection(indices=(1, 3))),
])
def test_gpus_flag_forms(text: str | None, want: Selection) -> None:
    assert parse_selection(text) == want


@pytest.mark.parametrize("text", ["two", "-1", "1,x", "1,1", ",", "1.5"])
def test_bad_gpus_flags_name_the_flag(text: str) -> None:
    with pytest.raises(InvalidArgument, match="--gpus"):
        parse_selection(text)


def test_selection_of_devices() -> None:
    assert select(Selection(all=True), FOUR[::-1]) == FOUR
    assert select(Selection(count=2), FOUR) == FOUR[:2]
    assert select(Selection(indices=(0, 2)), FOUR) == (FOUR[0], FOUR[2])
    assert select(Selection(all=True), ()) == ()
    with pytest.raises(InvalidArgument, match="no GPU with index 7"):
        select(Selection(indices=(1, 7)), FOUR)
    with pytest.raises(InvalidArgument, match="asks for 5 GPUs; this host has 4"):
        select(Selection(count=5), FOUR)
    with pytest.raises(InvalidArgument, match="this host has none"):
        select(Selection(count=1), ())


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA L4", "L4"), ("", ""), ("NVIDIA", ""),
])
def test_short_model_for_constraints(name: str, model: str) -> None:
    assert short_model(name) == model


def test_node_labels() -> None:
    h100 = tuple(Gpu(i, f"/dev/nvidia{i}", 195, i, "NVIDIA H100 80GB HBM3", 81559 * 2**20) for i in range(2))
    assert node_labels(h100) == {"gpu.count": "2", "gpu.model": "H100", "gpu.memory": "80Gi"}
    assert node_labels(FOUR) == {"gpu.count": "4"}          # declared: nothing else is known
    assert node_labels(()) == {}


def test_pick_lowest_free_indices() -> None:
    assert pick((0, 1, 2, 3), (), 2) == (0, 1)
    assert pick((0, 1, 2, 3), (0, 2), 2) == (1, 3)
    assert pick((0, 1, 2, 3), (0, 2), 3) is None
    assert pick((2, 5), (), 1) == (2,)
    assert pick((), (), 0) == ()


def test_whole_devices_and_environment() -> None:
    assert [requested(x) for x in (0, 1, 2.0, 0.5, 1.2)] == [0, 1, 2, 1, 2]
    assert visible_env((0, 2), True) == (("CUDA_VISIBLE_DEVICES", "0,1"), ("NVIDIA_VISIBLE_DEVICES", "0,2"),
                                         ("TCL_GPUS", "0,2"))
    assert visible_env((3,), True) == (("CUDA_VISIBLE_DEVICES", "0"), ("NVIDIA_VISIBLE_DEVICES", "3"),
                                       ("TCL_GPUS", "3"))
    assert visible_env((), True) == (("CUDA_VISIBLE_DEVICES", ""), ("NVIDIA_VISIBLE_DEVICES", "void"),
                                     ("TCL_GPUS", ""))
    assert visible_env((), False) == ()


def test_gpu_requests_are_whole_and_read_from_every_form() -> None:
    assert parse_resource_string("cpu_num=1; gpus=2").get("gpu") == 2
    with pytest.raises(InvalidArgument, match="whole number of GPUs"):
        parse_resource_string("gpu=0.5")
    doc = parse_job_file("gpus: 2\nresources: {cpu: 4}\ncommand: nvidia-smi -L\n")
    assert doc.get("resources") == Resources.of({"cpu": 4, "gpu": 2})
    with pytest.raises(InvalidArgument, match="contradicts"):
        parse_job_file("gpus: 2\nresources: {gpu: 1}\ncommand: x\n")


# ---- the allocator in the agent's state machine ----

def launch(task: str, gpus: int, attempt: int = 1) -> Launch:
    spec = JobSpec(("x",), Resources.of({"cpu": 0.1, "memory": 2**20, "gpu": gpus}))
    return Launch(task, attempt, task.split(".")[0], 0, spec)


def node() -> AgentTasks:
    return AgentTasks(Resources.of({"cpu": 4, "memory": 2**30, "gpu": 4}), Resources(), (0, 1, 2, 3))


def test_launches_get_the_lowest_free_devices_and_release_them_once() -> None:
    tasks = node()
    first = tasks.handle(LaunchAsked(launch("aaaaaaaa.0", 2), 1.0))
    assert first == [StartContainer(launch("aaaaaaaa.0", 2), (0, 1))]
    assert tasks.handle(LaunchAsked(launch("bbbbbbbb.0", 1), 1.0)) == [StartContainer(launch("bbbbbbbb.0", 1), (2,))]
    assert tasks.free().get("gpu") == 1
    running = tasks.handle(Launched("aaaaaaaa.0.1", 2.0))
    report = next(a.report for a in running if isinstance(a, Report))
    assert (report.state, report.gpus) == (TaskState.RUNNING, (0, 1))
    tasks.handle(Exited("aaaaaaaa.0.1", ExitStatus(0, 0, 3.0), None, 3.0))
    assert tasks.held_gpus() == {2: "bbbbbbbb.0.1"}
    tasks.handle(Exited("aaaaaaaa.0.1", ExitStatus(0, 0, 3.0), None, 3.0))      # a repeat releases nothing
    assert tasks.held_gpus() == {2: "bbbbbbbb.0.1"}
    # freed devices go to the next launch; the lowest first
    assert tasks.handle(LaunchAsked(launch("cccccccc.0", 3), 4.0)) == [
        StartContainer(launch("cccccccc.0", 3), (0, 1, 3))]


def test_failed_launch_and_kill_release_the_devices() -> None:
    tasks = node()
    tasks.handle(LaunchAsked(launch("aaaaaaaa.0", 4), 1.0))
    tasks.handle(LaunchFailed("aaaaaaaa.0.1", "exec failed", 2.0))
    assert tasks.held_gpus() == {}
    tasks.handle(LaunchAsked(launch("bbbbbbbb.0", 4), 1.0))
    tasks.handle(Launched("bbbbbbbb.0.1", 2.0))
    tasks.handle(KillAsked("bbbbbbbb.0", 1, "cancelled", 3.0))
    assert len(tasks.held_gpus()) == 4                     # held until the container has gone
    tasks.handle(Exited("bbbbbbbb.0.1", ExitStatus(None, 15, 4.0), None, 4.0))
    assert tasks.held_gpus() == {}


def test_too_few_free_devices_is_a_rejection() -> None:
    tasks = AgentTasks(Resources.of({"cpu": 4, "memory": 2**30, "gpu": 4}), Resources(), (0, 1, 2))
    actions = tasks.handle(LaunchAsked(launch("aaaaaaaa.0", 4), 1.0))       # capacity says 4, devices are 3
    assert len(actions) == 1 and isinstance(actions[0], Report) and actions[0].report.rejected
    assert "4 GPU(s) asked, 3 of 3 free" in actions[0].report.reason


def test_adopted_attempts_keep_their_devices() -> None:
    tasks = node()
    tasks.handle(Adopted(launch("aaaaaaaa.0", 2), (1, 3)))
    assert tasks.held_gpus() == {1: "aaaaaaaa.0.1", 3: "aaaaaaaa.0.1"}
    assert tasks.handle(LaunchAsked(launch("bbbbbbbb.0", 2), 1.0)) == [StartContainer(launch("bbbbbbbb.0", 2), (0, 2))]


def test_binding_round_trips_through_the_launch_record_and_the_outbox(tmp_path) -> None:  # type: ignore[no-untyped-def]
    save_record(tmp_path, launch("aaaaaaaa.0", 2), (1, 3))
    assert load_gpus(tmp_path) == (1, 3) and load_record(tmp_path) == launch("aaaaaaaa.0", 2)
    save_record(tmp_path, launch("aaaaaaaa.0", 0))
    assert load_gpus(tmp_path) == ()
    report = TaskReport("aaaaaaaa.0", 1, TaskState.RUNNING, at=1.0, gpus=(1, 3))
    assert report_from_json(report_to_json(7, report)) == (7, report)


# ---- device rules ----

GPU0, GPU1 = (3999, 0), (3999, 1)
CTL = (195, 255)


def test_v1_lines_deny_all_then_allow() -> None:
    lines = v1_device_limits(task_rules([GPU0], [CTL]))
    assert lines[0] == ("devices", "devices.deny", "a")
    texts = [v for _, f, v in lines[1:]]
    assert texts[:3] == ["c *:* m", "b *:* m", "c 1:3 rwm"]
    assert texts[-2:] == ["c 195:255 rwm", "c 3999:0 rwm"]
    assert "c 136:* rwm" in texts


CASES = [("c", 1, 3, "rw"), ("c", 1, 9, "r"), ("c", 136, 4, "rw"), ("c", *GPU0, "rw"), ("c", *GPU1, "rw"),
         ("c", *GPU1, "m"), ("b", 8, 0, "r"), ("b", 8, 0, "m"), ("c", *CTL, "rw"), ("c", 10, 200, "rw"),
         ("c", 1, 1, "r"), ("c", 4, 1, "w")]


@pytest.mark.parametrize("rules", [task_rules([GPU0], [CTL]), task_rules([]), STANDARD])
def test_bpf_program_decides_as_the_rules_do(rules) -> None:  # type: ignore[no-untyped-def]
    code = devbpf.program(rules)
    for kind, major, minor, access in CASES:
        assert run_bpf(code, kind, major, minor, access) == allows(rules, kind, major, minor, access), \
            (kind, major, minor, access)


def test_only_its_own_gpu_is_allowed() -> None:
    rules = task_rules([GPU0], [CTL])
    assert allows(rules, "c", *GPU0, "rw") and allows(rules, "c", *CTL, "rw")
    assert not allows(rules, "c", *GPU1, "rw") and not allows(task_rules([]), "c", *GPU0, "r")


def test_bpf_instruction_encoding() -> None:
    assert devbpf.insn(devbpf.LDX_MEM_W, 2, 1, 4) == bytes([0x61, 0x12, 4, 0, 0, 0, 0, 0])
    assert devbpf.insn(devbpf.JNE_K, 4, 0, 3, 195) == bytes([0x55, 0x04, 3, 0, 195, 0, 0, 0])
    assert devbpf.program(())[-16:] == devbpf.insn(devbpf.ALU64_MOV_K, 0, imm=0) + devbpf.insn(devbpf.EXIT)


def run_bpf(code: bytes, kind: str, major: int, minor: int, access: str) -> bool:
    """Interprets the few instructions devbpf emits over a bpf_cgroup_dev_ctx."""
    bits = sum({"m": 1, "r": 2, "w": 4}[a] for a in access)
    ctx = struct.pack("<III", (bits << 16) | (1 if kind == "b" else 2), major, minor)
    regs, pc = [0] * 11, 0
    insns = [struct.unpack("<BBhi", code[i:i + 8]) for i in range(0, len(code), 8)]
    while True:
        op, regs_byte, off, imm = insns[pc]
        dst, src = regs_byte & 0xF, regs_byte >> 4
        pc += 1
        if op == devbpf.LDX_MEM_W:
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif op == devbpf.ALU32_AND_K:
            regs[dst] &= imm & 0xFFFFFFFF
        elif op == devbpf.ALU32_RSH_K:
            regs[dst] = (regs[dst] & 0xFFFFFFFF) >> imm
        elif op == devbpf.ALU32_MOV_X:
            regs[dst] = regs[src] & 0xFFFFFFFF
        elif op == devbpf.ALU64_MOV_K:
            regs[dst] = imm
        elif op in (devbpf.JNE_K, devbpf.JNE_X):
            other = imm if op == devbpf.JNE_K else regs[src]
            pc += off if regs[dst] != other else 0
        elif op == devbpf.EXIT:
            return regs[0] == 1
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


def test_docker_tasks_get_their_devices_and_a_device_request() -> None:
    from tcluster.agent.runtime.base import TaskSpec
    from tcluster.agent.runtime.dockerspec import gpu_devices
    spec = TaskSpec("k", "t", 1, ("x",), Resources(), "/o", "/e", gpus=(1, 3),
                    gpu_paths=("/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl"), gpu_driver="nvidia")
    assert gpu_devices(spec) == {
        "devices": ["/dev/nvidia1:/dev/nvidia1:rwm", "/dev/nvidia3:/dev/nvidia3:rwm",
                    "/dev/nvidiactl:/dev/nvidiactl:rwm"],
        "device_requests": [{"Driver": "nvidia", "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}]}
    declared = TaskSpec("k", "t", 1, ("x",), Resources(), "/o", "/e", gpus=(0,), gpu_paths=("/dev/x0",))
    assert gpu_devices(declared) == {"devices": ["/dev/x0:/dev/x0:rwm"]}
    assert gpu_devices(TaskSpec("k", "t", 1, ("x",), Resources(), "/o", "/e")) == {}
