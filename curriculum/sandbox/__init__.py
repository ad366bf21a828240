"""Sandboxed execution of generated code.

Backends (chosen with :func:`get_sandbox`; ``auto`` prefers bubblewrap and logs a warning when it
falls back to the weaker rlimit backend; every :class:`ExecutionResult` names its backend).
:func:`containment` lists, as data, what a backend contains on this host and what it lacks
(``format_containment`` renders it for ``propel check``); ``docs/SANDBOX.md`` has the table.

``bubblewrap`` (``bwrap``)
    Protects against: network access (own empty network namespace); reading host files (only /usr
    and the Python installation are bound, read-only); writing anywhere but a private, size-limited
    tmpfs /tmp (/dev/shm is an empty read-only tmpfs); seeing or signalling host processes (pid
    namespace; every descendant, ``setsid`` escapees included, dies with it); host secrets in the
    environment (scrubbed to :data:`SCRUBBED_ENV`); runaway CPU (RLIMIT_CPU plus a wall clock),
    memory per process (RLIMIT_AS) and outside the address space (seccomp denies memfd, SysV shm
    and message queues), open files (RLIMIT_NOFILE), file size (RLIMIT_FSIZE), processes
    (RLIMIT_NPROC on a per-run uid as root), huge output; a seccomp deny-list (ptrace, namespaces,
    mounts, bpf, io_uring, ...). Runs as a fresh per-run uid (root) or ``nobody`` (user namespace)
    with no capabilities.
    Memory of all processes together: one cgroup per run where the host has a writable hierarchy
    (:mod:`curriculum.sandbox.cgroup`: v2 delegated, or v1 as root) with ``memory_mb`` for the whole
    run, no swap and ``pids.max``; without one the bound is ``max_procs x memory_mb`` plus tmpfs
    and pipe buffers (``containment`` and ``propel check --sandbox`` say which holds).
    Does NOT protect against: kernel bugs in the allowed syscalls, CPU contention with the host,
    reading world-readable files under the bound Python tree, side channels.

``rlimit`` (subprocess)
    The same limits, seccomp filter, run cgroup, cleared environment, per-run uid (root) and
    kill-everything-of-the-uid after the run, in an empty private working directory. Does NOT protect against:
    network access, reading any world-readable host file by absolute path (the working tree
    included), seeing host processes in /proc, and (when not root) writing the user's files or
    children that escape the process group with ``setsid``. Use it only where bubblewrap cannot run.

``docker``
    Network disabled, read-only root, tmpfs /tmp, memory/pids limits, ulimits, no capabilities, user
    nobody. Needs an engine; the container spec is a pure function tested without one.

Batched execution (:mod:`curriculum.sandbox.batch`, :mod:`curriculum.sandbox.forkserver`): one
sandbox process per batch forks a fresh child per program, each with its own result pipe;
determinism is checked with two separate processes evaluating the inputs in opposite orders.
"""

from curriculum.sandbox.backends import (
    SANDBOX_NAMES,
    BubblewrapSandbox,
    RlimitSandbox,
    bwrap_argv,
    bwrap_probe,
    get_sandbox,
    rlimit_argv,
)
from curriculum.sandbox.base import SCRUBBED_ENV, ExecutionResult, Limits, Sandbox, Status
from curriculum.sandbox.batch import BatchRunner, CallResult, Program, ProgramResult, compare_runs
from curriculum.sandbox.containment import Protection, containment, format_containment, missing_protections

__all__ = [
    "SANDBOX_NAMES",
    "SCRUBBED_ENV",
    "BatchRunner",
    "BubblewrapSandbox",
    "CallResult",
    "ExecutionResult",
    "Limits",
    "Program",
    "ProgramResult",
    "Protection",
    "RlimitSandbox",
    "Sandbox",
    "Status",
    "bwrap_argv",
    "bwrap_probe",
    "compare_runs",
    "containment",
    "format_containment",
    "get_sandbox",
    "missing_protections",
    "rlimit_argv",
]
