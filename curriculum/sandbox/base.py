"""Values shared by every sandbox backend: limits, results, the scrubbed environment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Status = Literal["ok", "error", "timeout", "memory", "killed", "output_limit"]
STATUSES: tuple[Status, ...] = ("ok", "error", "timeout", "memory", "killed", "output_limit")

#: The only environment a sandboxed process sees (no host variables, no secrets).
SCRUBBED_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
}

LOG_CHARS = 2000


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed process (base units in the names)."""

    cpu_s: int = 10
    wall_s: float = 20.0
    memory_mb: int = 1024
    max_procs: int = 16
    file_size_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    stdout_bytes: int = 32 * 1024 * 1024
    stderr_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for name in ("cpu_s", "memory_mb", "max_procs", "file_size_mb", "open_files", "tmpfs_mb",
                     "stdout_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)}")
        if self.wall_s <= 0:
            raise ValueError(f"Limits.wall_s must be positive, got {self.wall_s}")

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024

    @property
    def file_size_bytes(self) -> int:
        return self.file_size_mb * 1024 * 1024


@dataclass(frozen=True)
class ExecutionResult:
    """What happened to one sandboxed process. Failures are values, never exceptions.

    ``stdout`` is complete up to ``Limits.stdout_bytes`` (beyond that the process is killed and
    the status is ``output_limit``); use :meth:`log_view` for logs. ``stderr`` is capped.
    """

    status: Status
    stdout: str
    stderr: str
    returncode: int | None
    wall_s: float
    cpu_s: float
    reason: str | None = None
    backend: str = ""
    meta: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def log_view(self, chars: int = LOG_CHARS) -> dict[str, object]:
        """A small, log-safe summary (outputs truncated)."""
        return {
            "status": self.status,
            "reason": self.reason,
            "returncode": self.returncode,
            "wall_s": round(self.wall_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "backend": self.backend,
            "stdout": truncate(self.stdout, chars),
            "stderr": truncate(self.stderr, chars),
        }


def truncate(text: str, chars: int = LOG_CHARS) -> str:
    """``text`` cut to ``chars`` characters with a marker saying how much was dropped."""
    if len(text) <= chars:
        return text
    return f"{text[:chars]}... [{len(text) - chars} more chars]"


@runtime_checkable
class Sandbox(Protocol):
    """A way to run untrusted Python code."""

    #: Backend name: ``bubblewrap``, ``rlimit`` or ``docker``.
    name: str
    #: True when the backend isolates network and filesystem (not only resources).
    isolates_fs_and_network: bool
    #: True when the sandbox runs this host's own interpreter (so code compiled here runs there).
    host_python: bool

    def run_python(self, code: str, stdin: bytes = b"", limits: Limits | None = None,
                   site_packages: bool = False, hash_seed: int | None = None) -> ExecutionResult:
        """Run ``code`` with a scrubbed environment under ``limits``; ``site_packages`` makes the
        project's installed packages importable (needed by the math grader for sympy);
        ``hash_seed`` asks for that string-hash seed (``PYTHONHASHSEED``) where the backend can
        start Python with it (bubblewrap, rlimit; docker ignores it, and the batch fork server
        then re-executes itself with it)."""
        ...
