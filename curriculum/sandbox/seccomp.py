"""A seccomp-BPF deny-list for sandboxed code (standard library only; also runs inside the sandbox).

Protects against: memory that RLIMIT_AS does not count (``memfd_create``, ``memfd_secret``, System V
shared memory segments and message queues, which outlive their mappings), reaching other
processes' memory or descriptors (``ptrace``, ``process_vm_readv/writev``, ``pidfd_getfd``), new
namespaces (``unshare``, ``setns``, ``clone`` with namespace flags; ``clone3`` answers ENOSYS so the C
library falls back to ``clone``), mounts, keyrings, eBPF, ``userfaultfd``, ``perf_event_open``,
io_uring, module loading, kexec, swap, reboot, and foreign syscall ABIs (x32, i386 on x86_64).
Denied calls fail with EPERM. Does NOT protect against: kernel bugs in the allowed syscalls, or
memory in pipes and socket buffers (bounded by ``RLIMIT_NOFILE`` and the per-user pipe budget).

:func:`filter_program` is a pure function (the bytes bubblewrap loads with ``--seccomp FD``);
:data:`INSTALL_SOURCE` installs the same program in the current process with ``prctl`` (used by
the rlimit backend, which has no bubblewrap to do it).
"""

import platform
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_DENIED_X86_64 = (29, 68, 101, 155, 161, 163, 165, 166, 167, 168, 169, 175, 176, 246, 248, 249, 250,
                  272, 298, 303, 304, 308, 310, 311, 313, 319, 320, 321, 323, 425, 426, 427, 428, 429,
                  430, 431, 432, 433, 438, 442, 447)
_DENIED_AARCH64 = (39, 40, 41, 51, 89, 97, 104, 105, 106, 117, 142, 186, 194, 217, 218, 219, 224, 225,
                   241, 264, 265, 268, 270, 271, 273, 279, 280, 282, 294, 425, 426, 427, 428, 429, 430,
                   431, 432, 433, 438, 442, 447)
DENIED = {"x86_64": _DENIED_X86_64, "aarch64": _DENIED_AARCH64}
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = 435
X32_BIT = 0x40000000
#: CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
NAMESPACE_FLAGS = 0x7E020000

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38


def machine() -> str:
    """The syscall table in use: ``x86_64`` or ``aarch64`` (others are not supported)."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def _assemble(ops: list[tuple[int, str | None, str | None, int]], labels: dict[str, int]) -> bytes:
    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(ops):
        offsets = [0 if lab is None else labels[lab] - index - 1 for lab in (jt, jf)]
        if any(not 0 <= off < 256 for off in offsets):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
    return bytes(out)


def filter_program(arch: str | None = None) -> bytes:
    """The BPF program (``struct sock_filter[]``) for ``arch``; raises ValueError for other arches."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp syscall table for {arch}")
    ops: list[tuple[int, str | None, str | None, int]] = [
        (_LD_ABS, None, None, 4),
        (_JEQ, "native", "deny", AUDIT_ARCH[arch]),
    ]
    native = len(ops)
    ops.append((_LD_ABS, None, None, 0))
    if arch == "x86_64":
        ops.append((_JGE, "deny", None, X32_BIT))
    ops += [(_JEQ, "deny", None, nr) for nr in DENIED[arch]]
    ops.append((_JEQ, "nosys", None, CLONE3))
    ops.append((_JEQ, None, "allow", CLONE[arch]))
    ops.append((_LD_ABS, None, None, 16))  # low 32 bits of args[0]: the clone flags
    ops.append((_JSET, "deny", "allow", NAMESPACE_FLAGS))
    labels = {"native": native, "allow": len(ops), "deny": len(ops) + 1, "nosys": len(ops) + 2}
    ops += [(_RET, None, None, _ALLOW), (_RET, None, None, _ERRNO | EPERM), (_RET, None, None, _ERRNO | ENOSYS)]
    return _assemble(ops, labels)


def seccomp_mode() -> int:
    """The ``Seccomp:`` field of /proc/self/status (0 none, 2 filtered); -1 when unreadable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


INSTALL_SOURCE = '''
def _propel_install_seccomp(program):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    buf = ctypes.create_string_buffer(program, len(program))
    prog = Prog(len(program) // 8, ctypes.cast(buf, ctypes.c_char_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not install the seccomp filter")
'''


def install_preamble(arch: str | None = None) -> str:
    """One line of Python that installs the filter in the process running it (raises OSError when it cannot)."""
    program = filter_program(arch)
    return ("exec(" + repr(INSTALL_SOURCE) + ", _g := {}); _g['_propel_install_seccomp'](" + repr(program)
            + "); del _g\n")
