"""The device policy on cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program, written as raw
instructions (as runc's devicefilter does), loaded with bpf(BPF_PROG_LOAD) and attached to
the task's cgroup with bpf(BPF_PROG_ATTACH). cgroup v2 has no devices files: the kernel
asks the programs attached to a process's cgroup (and its ancestors) on every open and
mknod of a device node; 1 allows, 0 denies with EPERM.

`program` is pure (rules in, instruction bytes out) and tested instruction by instruction
and against `devices.allows`; `attach` does the two syscalls through ctypes. The program
stays attached until the cgroup is removed: nothing to detach at teardown."""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from .base import LaunchError
from .devices import ALL, ANY, BLOCK, DeviceRule

# struct bpf_cgroup_dev_ctx { u32 access_type /* access << 16 | type */; u32 major; u32 minor; }
DEV_BLOCK, DEV_CHAR = 1, 2                     # BPF_DEVCG_DEV_*
ACC_MKNOD, ACC_READ, ACC_WRITE = 1, 2, 4       # BPF_DEVCG_ACC_*
_ACCESS_BITS = {"m": ACC_MKNOD, "r": ACC_READ, "w": ACC_WRITE}
ALL_ACCESS = ACC_MKNOD | ACC_READ | ACC_WRITE

# Opcodes (linux/bpf_common.h, linux/bpf.h)
LDX_MEM_W = 0x61          # BPF_LDX | BPF_MEM | BPF_W
ALU32_AND_K = 0x54        # BPF_ALU | BPF_AND | BPF_K
ALU32_RSH_K = 0x74        # BPF_ALU | BPF_RSH | BPF_K
ALU32_MOV_X = 0xBC        # BPF_ALU | BPF_MOV | BPF_X
ALU64_MOV_K = 0xB7        # BPF_ALU64 | BPF_MOV | BPF_K
JNE_K = 0x55              # BPF_JMP | BPF_JNE | BPF_K
JNE_X = 0x5D              # BPF_JMP | BPF_JNE | BPF_X
EXIT = 0x95               # BPF_JMP | BPF_EXIT
R0, R1, R2, R3, R4, R5 = range(6)

BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
PROG_TYPE_CGROUP_DEVICE = 15
ATTACH_CGROUP_DEVICE = 6                       # BPF_CGROUP_DEVICE
F_ALLOW_MULTI = 2                              # BPF_F_ALLOW_MULTI: coexists with ancestors' programs
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_ATTR_SIZE = 128
_LOG_SIZE = 1 << 16


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One struct bpf_insn: u8 code, u8 dst:4 src:4 (little-endian bitfields), s16 off, s32 imm."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


_PROLOGUE = (
    insn(LDX_MEM_W, R2, R1, 0),     # r2 = ctx->access_type
    insn(ALU32_AND_K, R2, imm=0xFFFF),   # r2 = device type
    insn(LDX_MEM_W, R3, R1, 0),
    insn(ALU32_RSH_K, R3, imm=16),  # r3 = access asked
    insn(LDX_MEM_W, R4, R1, 4),     # r4 = major
    insn(LDX_MEM_W, R5, R1, 8),     # r5 = minor
)


def _access_mask(access: str) -> int:
    mask = 0
    for letter in access:
        mask |= _ACCESS_BITS[letter]
    return mask


def _rule_block(rule: DeviceRule) -> list[bytes]:
    """Allows (r0 = 1, exit) when the rule matches; falls through to the next rule otherwise.
    Each check jumps over the rest of the block when it fails."""
    checks: list[tuple[int, int, int, int]] = []           # (code, dst, src, imm) of each JNE
    moves: list[list[bytes]] = []                          # instructions before each check
    if rule.kind != ALL:
        checks.append((JNE_K, R2, 0, DEV_BLOCK if rule.kind == BLOCK else DEV_CHAR))
        moves.append([])
    mask = _access_mask(rule.access)
    if mask != ALL_ACCESS:                                 # (asked & allowed) must equal asked
        checks.append((JNE_X, R1, R3, 0))
        moves.append([insn(ALU32_MOV_X, R1, R3), insn(ALU32_AND_K, R1, imm=mask)])
    if rule.major != ANY:
        checks.append((JNE_K, R4, 0, rule.major))
        moves.append([])
    if rule.minor != ANY:
        checks.append((JNE_K, R5, 0, rule.minor))
        moves.append([])
    out: list[bytes] = []
    for i, (code, dst, src, imm) in enumerate(checks):
        out += moves[i]
        rest = sum(len(m) + 1 for m in moves[i + 1:]) + 2  # later checks, then r0 = 1; exit
        out.append(insn(code, dst, src, rest, imm))
    return out + [insn(ALU64_MOV_K, R0, imm=1), insn(EXIT)]


def program(rules: tuple[DeviceRule, ...]) -> bytes:
    """The whole program: the rules in order (first match allows), then deny."""
    body = [b for rule in rules for b in _rule_block(rule)]
    return b"".join([*_PROLOGUE, *body, insn(ALU64_MOV_K, R0, imm=0), insn(EXIT)])


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(0, f"bpf(): unknown syscall number on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), attr, ctypes.c_uint(_ATTR_SIZE))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def load(rules: tuple[DeviceRule, ...]) -> int:
    """bpf(BPF_PROG_LOAD): the program's fd. The verifier's log is in the error."""
    text = program(rules)
    code = ctypes.create_string_buffer(text, len(text))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")   # device programs need no GPL helpers
    log_buf = ctypes.create_string_buffer(_LOG_SIZE)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("<IIQQIIQII", attr, 0, PROG_TYPE_CGROUP_DEVICE, len(text) // 8,
                     ctypes.addressof(code), ctypes.addressof(license_), 1,
                     _LOG_SIZE, ctypes.addressof(log_buf), 0, 0)
    struct.pack_into("16s", attr, 48, b"tcl_devices")
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as e:
        verifier = log_buf.value.decode(errors="replace").strip()[-400:]
        raise OSError(e.errno, f"{e.strerror}{': ' + verifier if verifier else ''}") from None


def attach(cgroup_dir: str, rules: tuple[DeviceRule, ...]) -> None:
    """Load the rules' program and attach it to the cgroup; LaunchError says why not."""
    try:
        prog = load(rules)
    except OSError as e:
        raise LaunchError(f"cannot load the device filter (bpf BPF_PROG_LOAD): {e.strerror or e}") from e
    try:
        group = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            attr = ctypes.create_string_buffer(_ATTR_SIZE)
            struct.pack_into("<IIII", attr, 0, group, prog, ATTACH_CGROUP_DEVICE, F_ALLOW_MULTI)
            _bpf(BPF_PROG_ATTACH, attr)
        finally:
            os.close(group)
    except OSError as e:
        raise LaunchError(f"cannot attach the device filter to {cgroup_dir}: {e.strerror or e}") from e
    finally:
        os.close(prog)
