"""What each sandbox backend contains on this host, as data (for ``propel check`` and the docs).

:func:`containment` lists every protection with whether the backend provides it here and how (or
why not); :func:`missing_protections` names the ones it lacks; :func:`format_containment` renders
the list for a CLI. The answers depend on the host: root or not (per-run uids), whether a cgroup v2
memory controller is usable (:func:`cgroup_v2_memory`), the seccomp syscall table for the CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from curriculum.sandbox.base import Sandbox
from curriculum.sandbox.seccomp import AUDIT_ARCH, machine


@dataclass(frozen=True)
class Protection:
    name: str
    provided: bool
    detail: str


def cgroup_v2_memory(root: str = "/sys/fs/cgroup") -> tuple[bool, str]:
    """Whether a writable cgroup v2 hierarchy with the memory controller is available here.

    The backends do not create cgroups yet: on a host where this is True, run the daemon in a
    container or systemd unit whose cgroup has a ``memory.max`` to bound all sandboxes together.
    """
    for base in (root, os.path.join(root, "unified")):
        controllers = os.path.join(base, "cgroup.controllers")
        if os.path.exists(controllers):
            with open(controllers) as fh:
                names = fh.read().split()
            if "memory" not in names:
                return False, f"cgroup v2 at {base} has no memory controller (controllers: {' '.join(names) or 'none'})"
            if not os.access(base, os.W_OK):
                return False, f"cgroup v2 at {base} is not writable"
            return True, f"cgroup v2 memory controller at {base}"
    return False, "no cgroup v2 hierarchy mounted"


def _common(as_root: bool) -> list[Protection]:
    arch = machine()
    seccomp = arch in AUDIT_ARCH
    return [
        Protection("environment_scrubbed", True, "only PATH/LANG/LC_ALL/HOME/TMPDIR/PYTHON* are set"),
        Protection("cpu_time", True, "RLIMIT_CPU plus a wall-clock deadline"),
        Protection("memory_address_space", True, "RLIMIT_AS per process"),
        Protection("memory_outside_address_space", seccomp,
                   "seccomp denies memfd_create, memfd_secret, SysV shm and message queues"
                   if seccomp else f"no seccomp syscall table for {arch}: memfd/SysV shm are not limited"),
        Protection("memory_all_processes_together", False,
                   "no cgroup: the bound is max_procs x memory_mb plus tmpfs and pipe buffers "
                   f"({cgroup_v2_memory()[1]})"),
        Protection("open_files", True, "RLIMIT_NOFILE (Limits.open_files)"),
        Protection("file_size", True, "RLIMIT_FSIZE (Limits.file_size_mb; also caps each in-memory file)"),
        Protection("processes_per_run", as_root,
                   "RLIMIT_NPROC on a per-run uid" if as_root
                   else "RLIMIT_NPROC counts every process of the invoking user (set to its count + max_procs)"),
        Protection("kernel_attack_surface", seccomp,
                   "seccomp deny-list: ptrace, namespaces, mounts, keyrings, bpf, io_uring, userfaultfd, ..."
                   if seccomp else "no seccomp filter on this architecture"),
        Protection("candidate_isolation", True,
                   "batch: one fresh forked process per candidate, own result pipe, descendants killed and "
                   "temp files removed before the next candidate"),
    ]


def _bubblewrap(as_root: bool) -> list[Protection]:
    return [
        Protection("network", True, "own network namespace, loopback down"),
        Protection("host_files_read", True, "only /usr and the Python installation are bound, read-only"),
        Protection("host_files_write", True, "only a private size-limited tmpfs /tmp; /dev/shm read-only"),
        Protection("host_processes_hidden", True, "pid namespace with its own /proc"),
        Protection("descendants_killed", True, "the pid namespace ends with the run (setsid escapees included)"),
        *_common(as_root),
    ]


def _rlimit(as_root: bool) -> list[Protection]:
    return [
        Protection("network", False, "no network namespace: code can reach 127.0.0.1 and beyond"),
        Protection("host_files_read", False,
                   "runs in an empty temp dir with a cleared environment, but can read any world-readable "
                   "file by absolute path (the working tree included)"),
        Protection("host_files_write", as_root,
                   "per-run uid owns nothing but its temp dir; files it leaves in /tmp, /var/tmp, /dev/shm "
                   "are removed after the run" if as_root else "runs as the invoking user: can write its files"),
        Protection("host_processes_hidden", False, "no pid namespace: /proc lists host processes"),
        Protection("descendants_killed", as_root,
                   "every process of the per-run uid is killed after the run" if as_root
                   else "only the process group is killed; children that call setsid() survive"),
        *_common(as_root),
    ]


def _docker() -> list[Protection]:
    return [
        Protection("network", True, "network disabled"),
        Protection("host_files_read", True, "container filesystem, read-only root"),
        Protection("host_files_write", True, "size-limited tmpfs /tmp only"),
        Protection("host_processes_hidden", True, "container pid namespace"),
        Protection("descendants_killed", True, "the container is removed after the run"),
        Protection("environment_scrubbed", True, "only the scrubbed environment"),
        Protection("cpu_time", True, "RLIMIT_CPU ulimit plus a wall-clock deadline"),
        Protection("memory_address_space", True, "container memory limit"),
        Protection("memory_outside_address_space", True, "the container's cgroup counts memfd and shm"),
        Protection("memory_all_processes_together", True, "container cgroup memory.max (no swap)"),
        Protection("open_files", True, "nofile ulimit"),
        Protection("file_size", True, "fsize ulimit"),
        Protection("processes_per_run", True, "pids limit"),
        Protection("kernel_attack_surface", True, "Docker's default seccomp profile, no capabilities"),
        Protection("candidate_isolation", True, "batch: one fresh forked process per candidate"),
    ]


def containment(backend: str | Sandbox, as_root: bool | None = None) -> list[Protection]:
    """Every protection and whether ``backend`` (a name or a sandbox) provides it on this host."""
    name = backend if isinstance(backend, str) else backend.name
    root = os.geteuid() == 0 if as_root is None else as_root
    if name == "bubblewrap":
        return _bubblewrap(root)
    if name == "rlimit":
        return _rlimit(root)
    if name == "docker":
        return _docker()
    raise ValueError(f"unknown sandbox backend {name!r}")


def missing_protections(backend: str | Sandbox, as_root: bool | None = None) -> list[str]:
    """Names of the protections ``backend`` lacks here (empty: nothing known missing)."""
    return [p.name for p in containment(backend, as_root) if not p.provided]


def format_containment(backend: str | Sandbox, as_root: bool | None = None) -> str:
    """Human-readable lines, lacking protections first (for ``propel check``)."""
    name = backend if isinstance(backend, str) else backend.name
    items = sorted(containment(backend, as_root), key=lambda p: p.provided)
    lines = [f"sandbox {name}: lacks {', '.join(missing_protections(backend, as_root)) or 'nothing known'}"]
    lines += [f"  [{'x' if p.provided else ' '}] {p.name}: {p.detail}" for p in items]
    return "\n".join(lines)
