"""One cgroup per sandbox run: memory of all its processes together, its process count, kill-all.

A sandbox run (one ``run_python`` call: a single program, or a whole batch in the fork server)
gets its own cgroup when the host offers a writable hierarchy:

* **cgroup v2**, delegated: a directory whose ``cgroup.subtree_control`` enables ``memory`` (and
  ``pids``) and that this process may write: ``$PROPEL_SANDBOX_CGROUP`` when set to a path, else the
  cgroup this process is in. Limits: ``memory.max``, ``memory.swap.max`` = 0, ``pids.max``; the run
  ends with ``cgroup.kill``.
* **cgroup v1**, as root: a child of this process's own cgroup in the ``memory`` hierarchy (and in
  ``pids`` when mounted). Limits: ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``
  (memory plus swap: no swap), ``pids.max``; the run ends by SIGKILLing every pid listed in
  ``cgroup.procs`` until none is left.

The memory limit is ``Limits.memory_mb`` for all processes of the run together, counting what the
address-space limit does not: tmpfs and ``/dev/shm`` files, pipe buffers, page tables. ``pids.max``
is ``Limits.max_procs`` plus :data:`PIDS_HEADROOM` for the wrappers (bwrap, its init). The run's
process joins the cgroup before anything else starts (:meth:`RunCgroup.join_argv`, a ``/bin/sh``
prefix that writes 0, itself, to ``tasks`` on v1 or ``cgroup.procs`` on v2: no race with the
processes it starts). The cgroup files stay owned by root (or the daemon's user), so the sandboxed
uid can neither raise its limits nor leave. Its OOM-kill counter is handed
to the fork server as a read-only descriptor (:data:`OOM_FD_ENV`), which attributes an OOM kill to
the candidate that was running (``memory``).

Granularity: per run, not per candidate. The fork server runs one candidate at a time and kills
and removes what each leaves before the next, so the run's cgroup holds one candidate (plus the
server, about 10 MiB) at a time; a cgroup per candidate would cost a create/limit/remove cycle
per candidate (``benchmarks/sandbox_throughput.py`` measures it) and need the hierarchy delegated
into the sandbox, where the candidate's own uid could write it.

``PROPEL_SANDBOX_CGROUP=off`` disables cgroups; where none is writable the documented fallback
holds (seccomp + tmpfs sizes + per-process RLIMIT_AS; see ``docs/SANDBOX.md``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass

from curriculum.sandbox.base import Limits

log = logging.getLogger(__name__)

CGROUP_ENV = "PROPEL_SANDBOX_CGROUP"
#: Environment variable naming the descriptor (inside the sandbox) of the run's OOM-kill counter.
OOM_FD_ENV = "PROPEL_OOM_FD"
#: Name prefix of every cgroup the sandbox creates (tests assert none is left).
PREFIX = "propel-sbx-"
#: Tasks beyond ``Limits.max_procs`` for the wrappers (bwrap's monitor and init, the joining shell).
PIDS_HEADROOM = 4
JOIN_FAILED = "propel-cgroup: cannot join"
#: Writes 0 (the writing process itself) to every file given before ``--``, then execs the rest.
_JOIN_SCRIPT = ('while [ "$1" != -- ]; do echo 0 > "$1" || { echo "' + JOIN_FAILED +
                ' $1" >&2; exit 125; }; shift; done; shift; unset PWD; exec "$@"')


@dataclass(frozen=True)
class CgroupSupport:
    """Where run cgroups can be created here: ``version`` 0 means nowhere (``reason`` says why)."""

    version: int
    memory_parent: str | None
    pids_parent: str | None
    reason: str
    swap_limited: bool = True

    @property
    def usable(self) -> bool:
        return self.version > 0


def parse_mountinfo(text: str) -> list[tuple[str, str, str, set[str]]]:
    """``(mount root, mount point, fstype, super options)`` of every cgroup/cgroup2 mount."""
    mounts = []
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller name (``""`` for the v2 hierarchy) -> this process's path in its hierarchy."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                paths[name] = parts[2]
    return paths


def _own_dir(mount_root: str, mount_point: str, path: str) -> str:
    rel = path[len(mount_root):] if mount_root != "/" and path.startswith(mount_root) else path
    return os.path.join(mount_point, rel.lstrip("/"))


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _v2_support(directory: str) -> CgroupSupport | str:
    enabled = _read(os.path.join(directory, "cgroup.subtree_control")).split()
    if "memory" not in enabled:
        return f"cgroup v2 at {directory}: memory is not enabled in cgroup.subtree_control"
    if not os.access(directory, os.W_OK):
        return f"cgroup v2 at {directory} is not writable"
    pids = directory if "pids" in enabled else None
    return CgroupSupport(2, directory, pids, f"cgroup v2 (delegated) at {directory}")


def _v1_support(mounts: list[tuple[str, str, str, set[str]]], paths: dict[str, str]) -> CgroupSupport | str:
    dirs: dict[str, str] = {}
    for root, point, fstype, options in mounts:
        for name in ("memory", "pids"):
            if fstype == "cgroup" and name in options and name in paths:
                dirs[name] = _own_dir(root, point, paths[name])
    memory = dirs.get("memory")
    if memory is None:
        return "no cgroup v1 memory hierarchy"
    if not os.access(memory, os.W_OK):
        return f"cgroup v1 memory hierarchy at {memory} is not writable (not root)"
    pids = dirs.get("pids")
    pids = pids if pids is not None and os.access(pids, os.W_OK) else None
    swap = os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes"))
    return CgroupSupport(1, memory, pids, f"cgroup v1 memory at {memory}" + (f", pids at {pids}" if pids else ""),
                         swap_limited=swap)


def detect(setting: str | None = None, mountinfo: str | None = None, proc_cgroup: str | None = None) -> CgroupSupport:
    """Where this process may create run cgroups (``setting``: ``$PROPEL_SANDBOX_CGROUP``)."""
    setting = os.environ.get(CGROUP_ENV, "auto") if setting is None else setting
    if setting == "off":
        return CgroupSupport(0, None, None, f"disabled ({CGROUP_ENV}=off)")
    if setting not in ("", "auto"):
        found = _v2_support(setting)
        return found if isinstance(found, CgroupSupport) else CgroupSupport(0, None, None, found)
    mounts = parse_mountinfo(_read("/proc/self/mountinfo") if mountinfo is None else mountinfo)
    paths = parse_proc_cgroup(_read("/proc/self/cgroup") if proc_cgroup is None else proc_cgroup)
    reasons = []
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in paths:
            found = _v2_support(_own_dir(root, point, paths[""]))
            if isinstance(found, CgroupSupport):
                return found
            reasons.append(found)
    found = _v1_support(mounts, paths)
    if isinstance(found, CgroupSupport):
        return found
    reasons.append(found)
    return CgroupSupport(0, None, None, "; ".join(reasons) or "no cgroup hierarchy mounted")


@functools.lru_cache(maxsize=1)
def host_support() -> CgroupSupport:
    """:func:`detect` once per process (``$PROPEL_SANDBOX_CGROUP`` is read at the first call)."""
    return detect()


def limit_files(support: CgroupSupport, limits: Limits) -> list[tuple[str, str, str]]:
    """``(directory, file, value)`` to write for one run, in order (pure)."""
    memory, pids = str(support.memory_parent), support.pids_parent
    nproc = str(limits.max_procs + PIDS_HEADROOM)
    if support.version == 2:
        return [(memory, "memory.max", str(limits.memory_bytes)), (memory, "memory.swap.max", "0"),
                *([(memory, "pids.max", nproc)] if pids else [])]
    files = [(memory, "memory.limit_in_bytes", str(limits.memory_bytes))]
    if support.swap_limited:  # memory + swap; must come after memory.limit_in_bytes
        files.append((memory, "memory.memsw.limit_in_bytes", str(limits.memory_bytes)))
    return files + ([(pids, "pids.max", nproc)] if pids else [])


class RunCgroup:
    """The cgroup (one directory per hierarchy) of one sandbox run; :meth:`remove` ends it."""

    def __init__(self, support: CgroupSupport, limits: Limits) -> None:
        self.support = support
        self.limits = limits
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        parents = dict.fromkeys(p for p in (support.memory_parent, support.pids_parent) if p)
        self.dirs = [os.path.join(parent, name) for parent in parents]
        self.memory_dir = self.dirs[0]
        made: list[str] = []
        try:
            for path in self.dirs:
                os.mkdir(path)
                made.append(path)
            renamed = {support.memory_parent: self.memory_dir, support.pids_parent: self.dirs[-1]}
            for parent, filename, value in limit_files(support, limits):
                with open(os.path.join(renamed[parent], filename), "w") as fh:
                    fh.write(value)
        except OSError:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise

    @classmethod
    def create(cls, limits: Limits, support: CgroupSupport | None = None) -> RunCgroup | None:
        """A new run cgroup, or ``None`` (logged) where none can be made: the fallback applies."""
        support = host_support() if support is None else support
        if not support.usable:
            return None
        try:
            return cls(support, limits)
        except OSError as err:
            log.warning("sandbox: could not create a cgroup (%s); running without one", err)
            return None

    def join_argv(self) -> list[str]:
        """Prefix that moves the run's first process into every directory before it execs. On v1 it
        writes its thread to ``tasks``: moving one thread skips the global lock (an RCU grace
        period) that moving a whole process through ``cgroup.procs`` takes, about 7 ms per run here;
        the shell is single-threaded, so the process moves with it."""
        name = "tasks" if self.support.version == 1 else "cgroup.procs"
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "propel-cgroup-join", *(os.path.join(d, name) for d in self.dirs), "--"]

    @property
    def oom_file(self) -> str:
        """The file whose ``oom_kill N`` line counts the run's OOM kills."""
        name = "memory.events" if self.support.version == 2 else "memory.oom_control"
        return os.path.join(self.memory_dir, name)

    def oom_kills(self) -> int:
        return oom_kill_count(_read(self.oom_file))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs:
            found.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
        return sorted(found)

    def kill(self, rounds: int = 500) -> None:
        """SIGKILL every process of the run (``cgroup.kill`` on v2) until none is left."""
        kill_file = os.path.join(self.memory_dir, "cgroup.kill")
        if self.support.version == 2 and os.path.exists(kill_file):
            with contextlib.suppress(OSError), open(kill_file, "w") as fh:
                fh.write("1")
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill what is left and remove the directories (retried while exiting tasks linger)."""
        self.kill()
        deadline = time.monotonic() + timeout_s
        for path in reversed(self.dirs):
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.error("sandbox: could not remove cgroup %s: %s", path, err)
                        break
                    self.kill()
                    time.sleep(0.005)


def oom_kill_count(text: str) -> int:
    """The ``oom_kill N`` value of a ``memory.oom_control`` (v1) or ``memory.events`` (v2) text."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def leftover_cgroups(support: CgroupSupport | None = None) -> list[str]:
    """Run cgroups of this process still present (tests assert there are none)."""
    support = host_support() if support is None else support
    found = []
    for parent in dict.fromkeys(p for p in (support.memory_parent, support.pids_parent) if p):
        with contextlib.suppress(OSError):
            found += [os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(f"{PREFIX}{os.getpid()}-")]
    return found
