"""What each sandbox backend contains on this host, as data (for ``propel check`` and the docs).

:func:`containment` lists every protection with whether the backend provides it here and how (or
why not); :func:`missing_protections` names the ones it lacks; :func:`format_containment` renders
the list for a CLI. The answers depend on the host: root or not (per-run uids), whether a writable
cgroup hierarchy exists (:func:`curriculum.sandbox.cgroup.detect`: v2 delegated or v1 as root; the
backends then create one cgroup per run), the seccomp syscall table for the CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from curriculum.sandbox.base import Sandbox
from curriculum.sandbox.cgroup import CgroupSupport, host_support
from curriculum.sandbox.seccomp import AUDIT_ARCH, machine


@dataclass(frozen=True)
class Protection:
    name: str
    provided: bool
    detail: str


def cgroup_in_force(backend: str | Sandbox, support: CgroupSupport | None = None) -> CgroupSupport:
    """The cgroup support a backend's runs get here: none when the backend was built with
    ``cgroup=False`` or ``$PROPEL_SANDBOX_CGROUP=off``, else :func:`curriculum.sandbox.cgroup.host_support`."""
    if not isinstance(backend, str) and not getattr(backend, "use_cgroup", True):
        return CgroupSupport(0, None, None, "disabled for this sandbox (cgroup=False)")
    return host_support() if support is None else support


def _cgroup_protections(cg: CgroupSupport, limits: str) -> list[Protection]:
    if not cg.usable:
        return [Protection("memory_all_processes_together", False,
                           f"no cgroup ({cg.reason}): the bound is max_procs x memory_mb plus tmpfs and pipe buffers")]
    swap = "memory+swap limited" if cg.swap_limited else "swap NOT limited (no memsw accounting)"
    return [Protection("memory_all_processes_together", True,
                       f"one cgroup v{cg.version} per run: {limits}, {swap}; an OOM kill makes the running "
                       "candidate 'memory'")]


def _common(as_root: bool, cg: CgroupSupport) -> list[Protection]:
    arch = machine()
    pids = cg.usable and cg.pids_parent is not None
    per_run = ("RLIMIT_NPROC on a per-run uid" if as_root
               else "RLIMIT_NPROC counts every process of the invoking user (set to its count + max_procs)")
    seccomp = arch in AUDIT_ARCH
    return [
        Protection("environment_scrubbed", True, "only PATH/LANG/LC_ALL/HOME/TMPDIR/PYTHON* are set"),
        Protection("cpu_time", True, "RLIMIT_CPU plus a wall-clock deadline"),
        Protection("memory_address_space", True, "RLIMIT_AS per process"),
        Protection("memory_outside_address_space", seccomp,
                   "seccomp denies memfd_create, memfd_secret, SysV shm and message queues"
                   if seccomp else f"no seccomp syscall table for {arch}: memfd/SysV shm are not limited"),
        *_cgroup_protections(cg, "memory_mb for all processes together" + (", pids.max" if pids else "")),
        Protection("open_files", True, "RLIMIT_NOFILE (Limits.open_files)"),
        Protection("file_size", True, "RLIMIT_FSIZE (Limits.file_size_mb; also caps each in-memory file)"),
        Protection("processes_per_run", as_root or pids, per_run + (" and the run cgroup's pids.max" if pids else "")),
        Protection("kernel_attack_surface", seccomp,
                   "seccomp deny-list: ptrace, namespaces, mounts, keyrings, bpf, io_uring, userfaultfd, ..."
                   if seccomp else "no seccomp filter on this architecture"),
        Protection("candidate_isolation", True,
                   "batch: one fresh forked process per candidate, own result pipe, descendants killed and "
                   "temp files removed before the next candidate"),
    ]


def _bubblewrap(as_root: bool, cg: CgroupSupport) -> list[Protection]:
    return [
        Protection("network", True, "own network namespace, loopback down"),
        Protection("host_files_read", True, "only /usr and the Python installation are bound, read-only"),
        Protection("host_files_write", True, "only a private size-limited tmpfs /tmp; /dev/shm read-only"),
        Protection("host_processes_hidden", True, "pid namespace with its own /proc"),
        Protection("descendants_killed", True, "the pid namespace ends with the run (setsid escapees included)"),
        *_common(as_root, cg),
    ]


def _rlimit(as_root: bool, cg: CgroupSupport) -> list[Protection]:
    killed = ("every process of the per-run uid is killed after the run" if as_root
              else "only the process group is killed; children that call setsid() survive")
    return [
        Protection("network", False, "no network namespace: code can reach 127.0.0.1 and beyond"),
        Protection("host_files_read", False,
                   "runs in an empty temp dir with a cleared environment, but can read any world-readable "
                   "file by absolute path (the working tree included)"),
        Protection("host_files_write", as_root,
                   "per-run uid owns nothing but its temp dir; files it leaves in /tmp, /var/tmp, /dev/shm "
                   "are removed after the run" if as_root else "runs as the invoking user: can write its files"),
        Protection("host_processes_hidden", False, "no pid namespace: /proc lists host processes"),
        Protection("descendants_killed", as_root or cg.usable,
                   "every process in the run's cgroup is killed after the run" if cg.usable else killed),
        *_common(as_root, cg),
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


def containment(backend: str | Sandbox, as_root: bool | None = None,
                cgroup: CgroupSupport | None = None) -> list[Protection]:
    """Every protection and whether ``backend`` (a name or a sandbox) provides it on this host
    (``as_root`` and ``cgroup`` override what is detected)."""
    name = backend if isinstance(backend, str) else backend.name
    root = os.geteuid() == 0 if as_root is None else as_root
    if name == "bubblewrap":
        return _bubblewrap(root, cgroup_in_force(backend, cgroup))
    if name == "rlimit":
        return _rlimit(root, cgroup_in_force(backend, cgroup))
    if name == "docker":
        return _docker()
    raise ValueError(f"unknown sandbox backend {name!r}")


def missing_protections(backend: str | Sandbox, as_root: bool | None = None,
                        cgroup: CgroupSupport | None = None) -> list[str]:
    """Names of the protections ``backend`` lacks here (empty: nothing known missing)."""
    return [p.name for p in containment(backend, as_root, cgroup) if not p.provided]


def format_containment(backend: str | Sandbox, as_root: bool | None = None,
                       cgroup: CgroupSupport | None = None) -> str:
    """Human-readable lines, lacking protections first (for ``propel check``); the second line
    says which cgroup, if any, is in force."""
    name = backend if isinstance(backend, str) else backend.name
    items = sorted(containment(backend, as_root, cgroup), key=lambda p: p.provided)
    lines = [f"sandbox {name}: lacks {', '.join(missing_protections(backend, as_root, cgroup)) or 'nothing known'}"]
    if name != "docker":
        cg = cgroup_in_force(backend, cgroup)
        lines.append(f"  cgroup: {f'v{cg.version} in force' if cg.usable else 'none'} ({cg.reason})")
    lines += [f"  [{'x' if p.provided else ' '}] {p.name}: {p.detail}" for p in items]
    return "\n".join(lines)
