"""A seccomp filter for the `code` task's jail: system calls that no test of a function needs, refused by the kernel.

bubblewrap loads it (`--seccomp FD`, a compiled classic BPF program) just before it starts Python, so
it holds even when the Python layers behind it are switched off by the code itself. Refused with
EPERM: new processes (`fork`, `vfork`, `clone` without `CLONE_THREAD`; `clone3` gets ENOSYS so that
threads fall back to `clone`), every socket, signals (`kill`, `tkill`, `tgkill`), `ptrace` and
reading or writing other processes' memory, namespaces and mounts, keys, `bpf`, `perf_event_open`,
`userfaultfd`, `io_uring` and kernel modules. `execve` stays allowed: bubblewrap needs it to start
Python after the filter is in, and the audit hook refuses it after that. x86_64 only: elsewhere
`program()` is None and the jail runs without it (the task's start-up line says so).
"""

from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
CLONE_THREAD = 0x00010000
LOAD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
X86_64_REFUSED = {  # name: number (arch/x86/entry/syscalls/syscall_64.tbl)
    "socket": 41, "socketpair": 53, "fork": 57, "vfork": 58, "kill": 62, "ptrace": 101, "tkill": 200,
    "tgkill": 234, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166, "init_module": 175,
    "delete_module": 176, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
}
CLONE, CLONE3 = 56, 435


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes | None:
    """The filter as bytes for `bwrap --seccomp`, or None on a machine it is not written for."""
    if platform.machine() != "x86_64":
        return None
    ops = [_op(LOAD_ABS, 4), _op(JEQ, AUDIT_ARCH_X86_64, 1, 0), _op(RET, RET_ERRNO | EPERM),  # other ABIs
           _op(LOAD_ABS, 0), _op(JGE, 0x40000000, 0, 1), _op(RET, RET_ERRNO | EPERM),  # x32 system calls
           _op(JEQ, CLONE3, 0, 1), _op(RET, RET_ERRNO | ENOSYS)]
    for number in sorted(X86_64_REFUSED.values()):
        ops += [_op(JEQ, number, 0, 1), _op(RET, RET_ERRNO | EPERM)]
    ops += [_op(JEQ, CLONE, 0, 3), _op(LOAD_ABS, 16),  # clone's flags: the low half of args[0]
            _op(JSET, CLONE_THREAD, 1, 0), _op(RET, RET_ERRNO | EPERM), _op(RET, RET_ALLOW)]
    return b"".join(ops)
