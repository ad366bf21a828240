"""Sandboxed execution of generated code.

Backends (chosen with :func:`get_sandbox`; ``auto`` prefers bubblewrap and logs a warning when it
falls back to the weaker rlimit backend; every :class:`ExecutionResult` names its backend):

``bubblewrap`` (``bwrap``)
    Protects against: network access (own empty network namespace, loopback down, so host
    services on 127.0.0.1 are unreachable); reading host files (only /usr, the Python installation
    and, for the math grader, the project venv are bound, read-only; no /home, /root, /etc, /work);
    writing anywhere but a private, size-limited tmpfs /tmp that vanishes with the sandbox; seeing
    host processes or their environment (pid namespace, own /proc); host secrets in the environment
    (scrubbed to :data:`SCRUBBED_ENV`); runaway CPU (RLIMIT_CPU plus a wall-clock deadline),
    memory (RLIMIT_AS), fork bombs (RLIMIT_NPROC as uid nobody, pid namespace), huge files
    (RLIMIT_FSIZE), huge output (stdout capped, process killed); stragglers (``--die-with-parent``,
    ``--new-session``, the whole process group is SIGKILLed after every run). Runs as ``nobody``
    with no capabilities (``setpriv`` when started as root, a user namespace otherwise).
    Does NOT protect against: kernel exploits (the sandbox shares the host kernel; no seccomp filter
    is installed), CPU contention with the host, reading world-readable files under the bound
    Python/venv trees, or side channels. RLIMIT_NPROC counts every process of uid ``nobody`` on the
    host, so concurrent sandboxes share that budget.

``rlimit`` (subprocess)
    Protects against: runaway CPU, memory, processes (when started as root it drops to ``nobody``
    so RLIMIT_NPROC applies), file size, huge output, stragglers in the process group, host
    secrets in ``os.environ`` (scrubbed). Does NOT protect against: network access (it can connect
    to 127.0.0.1 and beyond), reading any file the user can read, writing where the user can write
    (as a non-root user that includes the user's own files), reading other same-user processes'
    environments via /proc, or children that escape the process group with ``setsid``. Use it only
    where bubblewrap cannot run; it is reported as weaker.

``docker``
    Network disabled, read-only root, tmpfs /tmp, memory/pids/ulimits, no capabilities, user nobody.
    Needs an engine; the container spec is a pure function tested without one. Per-run container
    start-up makes it much slower than bubblewrap; it is meant for SWE repositories.

Batched execution (:mod:`curriculum.sandbox.batch`) runs many (function, input) pairs per process
with per-call timers; determinism is checked with two separate processes.
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
    "RlimitSandbox",
    "Sandbox",
    "Status",
    "bwrap_argv",
    "bwrap_probe",
    "compare_runs",
    "get_sandbox",
    "rlimit_argv",
]
