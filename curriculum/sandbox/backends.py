"""The bubblewrap and rlimit-subprocess backends, and ``auto`` selection.

The argv builders (:func:`bwrap_argv`, :func:`rlimit_argv`) are pure functions of their inputs so
the exact isolation applied is unit-testable; the classes only add process execution. Started as
root, every run gets its own uid (:func:`run_uid`), so ``RLIMIT_NPROC`` counts that run's processes
only and every process of the run can be found and killed afterwards (``setsid`` escapees too).
Both backends install the seccomp deny-list of :mod:`curriculum.sandbox.seccomp` (bubblewrap with
``--seccomp``, rlimit with a ``prctl`` preamble). What each backend does not contain is listed by
:func:`curriculum.sandbox.containment.containment`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from curriculum.sandbox.base import SCRUBBED_ENV, ExecutionResult, Limits, Sandbox
from curriculum.sandbox.cgroup import OOM_FD_ENV, RunCgroup
from curriculum.sandbox.forkserver import SANDBOX_UID_MIN
from curriculum.sandbox.process import prlimit_argv, processes_of_uid, remove_tree, run_command
from curriculum.sandbox.seccomp import filter_program, install_preamble

log = logging.getLogger(__name__)

NOBODY = 65534
MAX_ARGV_CODE = 100_000
SETPRIV = "/usr/bin/setpriv"
PRLIMIT = "/usr/bin/prlimit"


@dataclass(frozen=True)
class PythonRuntime:
    """Which interpreter runs inside the sandbox, and which host paths it needs."""

    executable: str
    flags: tuple[str, ...]
    binds: tuple[str, ...]


def python_runtime(site_packages: bool, hash_seed: int | None = None) -> PythonRuntime:
    """The host interpreter: the base one (stdlib only, ``-I -S``) or the project venv (``-I``).

    With ``hash_seed`` the flags are ``-s -P`` instead of ``-I`` (``-I`` includes ``-E``, which
    would make Python ignore ``PYTHONHASHSEED``, see :func:`python_env`): no user site, no current
    directory on ``sys.path``; the environment is the scrubbed one, so ``-E`` has nothing else to hide.
    """
    isolation = ("-I",) if hash_seed is None else ("-s", "-P")
    if site_packages:
        binds = tuple(dict.fromkeys((sys.base_prefix, sys.prefix)))
        return PythonRuntime(sys.executable, isolation, binds)
    return PythonRuntime(os.path.realpath(sys.executable), (*isolation, "-S"), (sys.base_prefix,))


def unreadable_runtime(runtime: PythonRuntime, *, ancestors: bool) -> str | None:
    """One line naming the fix when a sandbox uid (neither the owner nor in the group) cannot read the
    venv the run needs, else ``None``. Python started by such a user does not fail: it silently falls
    back to the base interpreter without the venv's packages ("No module named pytest").
    ``ancestors``: the run sees the host's directories above the prefix (rlimit); bubblewrap makes them.

    The base interpreter's own prefix is not checked: where it is unreadable (pyenv under a 0700
    ``/root``) Python falls back to the system's standard library of the same version, which works."""
    for prefix in runtime.binds:
        if prefix == sys.base_prefix:
            continue
        for path in [*(_ancestors(prefix) if ancestors else []), prefix]:
            try:
                mode = stat.S_IMODE(os.stat(path).st_mode)
            except OSError:
                continue
            need = stat.S_IXOTH | (stat.S_IROTH if path == prefix else 0)
            if mode & need != need:
                return (f"the sandbox user cannot read the Python environment {prefix}: {path} has mode {mode:04o}; "
                        f"make it readable (chmod o+rx {path}) or keep the checkout in a world-readable directory")
    return None


def unreadable_runtime_result(runtime: PythonRuntime, backend: str, *, ancestors: bool) -> ExecutionResult | None:
    """:func:`unreadable_runtime` as an infrastructure error (logged once per message), else ``None``."""
    why = unreadable_runtime(runtime, ancestors=ancestors)
    if why is None:
        return None
    _log_once(why)
    return ExecutionResult("error", "", "", None, 0.0, 0.0, why, backend, {"infra": True})


@functools.lru_cache(maxsize=8)
def _log_once(message: str) -> None:
    log.error("sandbox: %s", message)


#: ``PYTHONHASHSEED`` accepts 0 to 2**32 - 1 (Python refuses to start otherwise).
MAX_HASH_SEED = (1 << 32) - 1


def python_env(hash_seed: int | None) -> dict[str, str]:
    """The scrubbed environment, plus ``PYTHONHASHSEED`` when ``hash_seed`` is given (ValueError
    outside 0 to :data:`MAX_HASH_SEED`)."""
    if hash_seed is None:
        return dict(SCRUBBED_ENV)
    if type(hash_seed) is not int or not 0 <= hash_seed <= MAX_HASH_SEED:
        raise ValueError(f"hash_seed must be an int from 0 to {MAX_HASH_SEED}, got {hash_seed!r}")
    return {**SCRUBBED_ENV, "PYTHONHASHSEED": str(hash_seed)}


@functools.lru_cache(maxsize=1)
def _full_uid_map() -> bool:
    try:
        with open("/proc/self/uid_map") as fh:
            return fh.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


#: Run uids come from a slot of 2**24 uids: ``PROPEL_SANDBOX_UID_SLOT = k`` (0 by default, 0-63) draws them from
#: ``[SANDBOX_UID_MIN + k·2**24, SANDBOX_UID_MIN + (k+1)·2**24)``, so sandboxing processes given different slots
#: on one host (two daemons; the test suite's xdist workers) can tell their runs apart.
UID_SLOT_SIZE, UID_SLOTS = 1 << 24, 64


def uid_slot() -> tuple[int, int]:
    """``[lo, hi)`` of this process's run uids (``PROPEL_SANDBOX_UID_SLOT``); ``ValueError`` naming the setting."""
    raw = os.environ.get("PROPEL_SANDBOX_UID_SLOT", "0")
    if not raw.isdigit() or int(raw) >= UID_SLOTS:
        raise ValueError(f"PROPEL_SANDBOX_UID_SLOT must be an integer from 0 to {UID_SLOTS - 1}, got {raw!r}")
    lo = SANDBOX_UID_MIN + int(raw) * UID_SLOT_SIZE
    return lo, lo + UID_SLOT_SIZE


def run_uid() -> int | None:
    """The uid one sandboxed run executes as: a fresh random uid of this process's slot
    (:func:`uid_slot`, at or above ``SANDBOX_UID_MIN``) as root (so
    limits, processes and files are per run), ``nobody`` as root in a user namespace that maps few
    uids, ``None`` (the invoking user) when not root."""
    if os.geteuid() != 0:
        return None
    if not _full_uid_map():
        return NOBODY
    lo, hi = uid_slot()
    return lo + secrets.randbelow(hi - lo)


def nproc_limit(limits: Limits, uid: int | None) -> int:
    """RLIMIT_NPROC for a run: ``max_procs`` on a per-run uid; otherwise the uid's current process
    count plus ``max_procs`` (the limit counts every process of the uid on the host)."""
    if uid is not None and uid >= SANDBOX_UID_MIN:
        return limits.max_procs
    return len(processes_of_uid(os.getuid() if uid is None else uid)) + limits.max_procs


def seccomp_supported() -> bool:
    try:
        filter_program()
    except ValueError:
        return False
    return True


def uid_drop_argv(setpriv: str = SETPRIV, uid: int = NOBODY) -> list[str]:
    """``setpriv`` prefix that drops root to ``uid`` with no capabilities left anywhere."""
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--"]


def host_symlinks(names: tuple[str, ...] = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")) -> dict[str, str]:
    """Top-level host directories that are symlinks (merged /usr): name -> target."""
    return {name: os.readlink(name) for name in names if os.path.islink(name)}


def _ancestors(path: str) -> list[str]:
    parts = PurePosixPath(path).parents
    return [str(p) for p in reversed(parts) if str(p) != "/"]


def bwrap_argv(inner: list[str], binds: tuple[str, ...], limits: Limits, *, as_root: bool,
               symlinks: dict[str, str], bwrap: str = "bwrap", uid: int = NOBODY,
               seccomp_fd: int | None = None) -> list[str]:
    """The full bubblewrap command line around ``inner`` (pure).

    As root, no user namespace is created (it would map the sandbox user back to host root, which
    is exempt from ``RLIMIT_NPROC``); instead ``setpriv`` drops to ``nobody`` inside the other
    namespaces. Unprivileged, ``--unshare-all`` with a user namespace maps the sandbox to ``nobody``.
    """
    if as_root:
        argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try"]
        inner = [*uid_drop_argv(uid=uid), *inner]
    else:
        argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
                "--cap-drop", "ALL"]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for name, target in sorted(symlinks.items()):
        argv += ["--symlink", target, name]
    # The private /tmp comes before the binds: an interpreter or venv that lives under /tmp (a CI
    # checkout there) is bound read-only on top of it instead of being hidden by it.
    argv += ["--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    made: set[str] = {"/usr", "/tmp"}
    for path in binds:
        for parent in _ancestors(path):
            if parent not in made and not parent.startswith("/usr/"):
                argv += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        if not path.startswith("/usr/"):
            argv += ["--ro-bind", path, path]
    # /dev/shm is an empty read-only tmpfs: no POSIX shared memory outside the address-space limit.
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--remount-ro", "/dev/shm",
             "--chdir", "/tmp"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, "--", *inner]


def rlimit_argv(inner: list[str], limits: Limits, *, as_root: bool, uid: int = NOBODY,
                nproc: int | None = None) -> list[str]:
    """The rlimit-backend command line (pure): ``prlimit`` then, as root, ``setpriv`` to ``uid``."""
    return [*prlimit_argv(limits, PRLIMIT, nproc), *(uid_drop_argv(uid=uid) if as_root else []), *inner]


def _too_large(code: str, backend: str) -> ExecutionResult | None:
    if len(code) <= MAX_ARGV_CODE:
        return None
    return ExecutionResult("error", "", "", None, 0.0, 0.0,
                           f"code of {len(code)} chars exceeds {MAX_ARGV_CODE}; pass data on stdin", backend)


@contextlib.contextmanager
def run_cgroup(enabled: bool, limits: Limits) -> Iterator[tuple[RunCgroup | None, dict[str, str], tuple[int, ...]]]:
    """The run's cgroup (``None`` where none can be made), the environment entry and the descriptor
    that hand its OOM-kill counter to the fork server; the descriptor is closed afterwards (the
    cgroup itself is removed by :func:`curriculum.sandbox.process.run_command`)."""
    cgroup = RunCgroup.create(limits) if enabled else None
    fd = -1
    try:
        if cgroup is not None:
            fd = os.open(cgroup.oom_file, os.O_RDONLY)
        yield cgroup, ({OOM_FD_ENV: str(fd)} if fd >= 0 else {}), ((fd,) if fd >= 0 else ())
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        if fd >= 0:
            os.close(fd)


class BubblewrapSandbox:
    """Namespaces (pid, net, ipc, uts), read-only binds, private /tmp, rlimits, uid nobody."""

    name = "bubblewrap"
    isolates_fs_and_network = True
    host_python = True

    def __init__(self, limits: Limits | None = None, bwrap: str | None = None, cgroup: bool = True) -> None:
        self.limits = limits or Limits()
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        #: create a cgroup per run where the host allows it (:mod:`curriculum.sandbox.cgroup`)
        self.use_cgroup = cgroup

    def argv(self, code: str, limits: Limits, site_packages: bool, uid: int | None = None,
             seccomp_fd: int | None = None, hash_seed: int | None = None) -> list[str]:
        runtime = python_runtime(site_packages, hash_seed)
        inner = [*prlimit_argv(limits, PRLIMIT, nproc_limit(limits, uid)), runtime.executable, *runtime.flags,
                 "-c", code]
        return bwrap_argv(inner, runtime.binds, limits, as_root=os.geteuid() == 0,
                          symlinks=host_symlinks(), bwrap=self.bwrap, uid=uid or NOBODY, seccomp_fd=seccomp_fd)

    def run_python(self, code: str, stdin: bytes = b"", limits: Limits | None = None,
                   site_packages: bool = False, hash_seed: int | None = None) -> ExecutionResult:
        limits = limits or self.limits
        too_large = _too_large(code, self.name)
        if too_large is not None:
            return too_large
        if os.geteuid() == 0:  # the run drops to another uid, which must be able to read the runtime
            unreadable = unreadable_runtime_result(python_runtime(site_packages, hash_seed), self.name,
                                                   ancestors=False)
            if unreadable is not None:
                return unreadable
        env = python_env(hash_seed)
        uid = run_uid()
        read_fd, write_fd = os.pipe()
        try:
            if seccomp_supported():
                os.write(write_fd, filter_program())
            os.close(write_fd)
            write_fd = -1
            argv = self.argv(code, limits, site_packages, uid, read_fd if seccomp_supported() else None, hash_seed)
            with run_cgroup(self.use_cgroup, limits) as (cgroup, oom_env, fds):
                return run_command(argv, stdin, {**env, **oom_env}, limits, self.name, signal_offset=128,
                                   pass_fds=(read_fd, *fds), uid=uid if uid != NOBODY else None, cgroup=cgroup)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)


class RlimitSandbox:
    """Weaker fallback: rlimits, seccomp, an empty private working directory, a cleared environment
    and (as root) a per-run uid; no namespaces.

    It does NOT isolate the network, the host's process list or world-readable files: code can
    connect to local services and read (and, when not root, write) whatever its user can.
    """

    name = "rlimit"
    isolates_fs_and_network = False
    host_python = True

    def __init__(self, limits: Limits | None = None, cgroup: bool = True) -> None:
        self.limits = limits or Limits()
        #: create a cgroup per run where the host allows it (:mod:`curriculum.sandbox.cgroup`)
        self.use_cgroup = cgroup

    def run_python(self, code: str, stdin: bytes = b"", limits: Limits | None = None,
                   site_packages: bool = False, hash_seed: int | None = None) -> ExecutionResult:
        limits = limits or self.limits
        too_large = _too_large(code, self.name)
        if too_large is not None:
            return too_large
        runtime = python_runtime(site_packages, hash_seed)
        uid = run_uid()
        unreadable = unreadable_runtime_result(runtime, self.name, ancestors=True) if uid is not None else None
        if unreadable is not None:
            return unreadable
        env = python_env(hash_seed)
        workdir = tempfile.mkdtemp(prefix="propel-sbx-")
        try:
            if uid is not None:
                os.chown(workdir, uid, uid)
            env.update(HOME=workdir, TMPDIR=workdir)
            if seccomp_supported():
                code = install_preamble() + code
            argv = rlimit_argv([runtime.executable, *runtime.flags, "-c", code], limits, as_root=uid is not None,
                               uid=uid or NOBODY, nproc=nproc_limit(limits, uid))
            with run_cgroup(self.use_cgroup, limits) as (cgroup, oom_env, fds):
                return run_command(argv, stdin, {**env, **oom_env}, limits, self.name, cwd=workdir, pass_fds=fds,
                                   uid=uid if uid is not None and uid != NOBODY else None, cgroup=cgroup)
        finally:
            with contextlib.suppress(OSError):
                remove_tree(workdir)


@functools.lru_cache(maxsize=4)
def bwrap_probe(bwrap: str | None = None) -> tuple[bool, str]:
    """Whether bubblewrap works here (runs ``print(1)`` in a sandbox); cached per process."""
    path = bwrap or shutil.which("bwrap")
    if path is None:
        return False, "bwrap not found on PATH (apt-get install bubblewrap)"
    if os.geteuid() == 0 and not os.path.exists(SETPRIV):
        return False, f"{SETPRIV} missing (util-linux), needed to drop root inside bubblewrap"
    result = BubblewrapSandbox(Limits(wall_s=20.0), path).run_python("print(1)")
    if result.ok and result.stdout.strip() == "1":
        return True, f"bubblewrap works ({path})"
    return False, f"bubblewrap probe failed: {result.reason}: {result.stderr.strip()[:300]}"


SANDBOX_NAMES = ("auto", "bubblewrap", "rlimit", "docker")


def get_sandbox(name: str = "auto", limits: Limits | None = None) -> Sandbox:
    """Build a backend by name; ``auto`` prefers bubblewrap and logs (warns) when it falls back."""
    if name == "bubblewrap":
        return BubblewrapSandbox(limits)
    if name == "rlimit":
        return RlimitSandbox(limits)
    if name == "docker":
        from curriculum.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(limits)
    if name != "auto":
        raise ValueError(f"unknown sandbox {name!r}; choose one of {', '.join(SANDBOX_NAMES)}")
    ok, reason = bwrap_probe()
    if ok:
        log.info("sandbox: using bubblewrap (%s)", reason)
        return BubblewrapSandbox(limits)
    log.warning("sandbox: bubblewrap unavailable (%s); using the WEAKER rlimit backend "
                "(no network or filesystem isolation)", reason)
    return RlimitSandbox(limits)
