"""Run one sandboxed command: capped pipes, wall-clock deadline, every process of the run killed.

Shared by the bubblewrap and rlimit backends. Resource limits are applied by the command line
itself (``prlimit``), not with ``preexec_fn``, so runs may be started from several threads.

After every run the process group is SIGKILLed and, when the run had its own uid
(:func:`curriculum.sandbox.backends.run_uid`, as root), every process of that uid is SIGKILLed too
(so children that left the process group with ``setsid`` die with the run) and the entries that uid
left in the shared temp dirs (/tmp, /var/tmp, /dev/shm) are removed. Without a per-run uid (not
root), escaped children of the rlimit backend are not found: bubblewrap's pid namespace is what
ends them there, or the run's cgroup (:mod:`curriculum.sandbox.cgroup`) where one is in force: every
process in it is killed, and an OOM kill in it makes a failed run ``memory``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from curriculum.sandbox.base import ExecutionResult, Limits, Status
from curriculum.sandbox.cgroup import JOIN_FAILED, RunCgroup


@dataclass
class Capture:
    stdout: bytearray
    stderr: bytearray
    over_limit: bool = False
    timed_out: bool = False


def prlimit_argv(limits: Limits, prlimit: str = "/usr/bin/prlimit", nproc: int | None = None) -> list[str]:
    """``prlimit`` prefix applying CPU seconds, address space, processes, file size and open-file
    limits; ``nproc`` overrides ``limits.max_procs`` (RLIMIT_NPROC counts every process of the uid)."""
    return [
        prlimit,
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={limits.memory_bytes}",
        f"--nproc={nproc if nproc is not None else limits.max_procs}",
        f"--fsize={limits.file_size_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
    ]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def processes_of_uid(uid: int) -> list[int]:
    """Live (not zombie) pids whose real uid is ``uid``, from /proc/PID/status (readable even for
    non-dumpable processes)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return pids


def kill_uid(uid: int, rounds: int = 200) -> int:
    """SIGKILL every process of ``uid`` until none is left (a fork bomb is bounded by RLIMIT_NPROC);
    returns how many were signalled."""
    killed = 0
    for _ in range(rounds):
        pids = processes_of_uid(uid)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(pids)
        time.sleep(0.001)
    return killed


def remove_files_of_uid(uid: int, dirs: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")) -> list[str]:
    """Remove the entries owned by ``uid`` directly inside the shared temp ``dirs``; returns them."""
    removed = []
    for base in dirs:
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
            except OSError:
                continue
            remove_tree(entry.path)
            removed.append(entry.path)
    return removed


def remove_tree(path: str) -> None:
    """``rm -rf`` that also handles directories made unwritable or nested too deep for rmtree."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        subprocess.run(["/usr/bin/chmod", "-R", "u+rwx", "--", path], check=False, capture_output=True)
        subprocess.run(["/usr/bin/rm", "-rf", "--one-file-system", "--", path], check=False, capture_output=True)


def _pump(proc: subprocess.Popen[bytes], stdin: bytes, limits: Limits, deadline: float) -> Capture:
    """Feed stdin and collect stdout/stderr until the process exits, the deadline or the cap."""
    cap = Capture(bytearray(), bytearray())
    assert proc.stdin and proc.stdout and proc.stderr
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    os.set_blocking(proc.stdin.fileno(), False)
    pending = memoryview(stdin)
    if pending:
        sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
    else:
        proc.stdin.close()
    exited = False
    try:
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                cap.timed_out = True
                break
            for key, _ in sel.select(timeout=remaining):
                if key.data == "exit":
                    exited = True
                elif key.data == "in":
                    try:
                        written = os.write(proc.stdin.fileno(), pending[:65536])
                    except (BrokenPipeError, BlockingIOError):
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                else:
                    _read_into(sel, key.fileobj, cap, key.data, limits)
            if cap.over_limit:
                break
        if exited:
            _drain(proc, cap, limits)
    finally:
        sel.close()
        os.close(pidfd)
        if not proc.stdin.closed:
            proc.stdin.close()
    return cap


def _read_into(sel: selectors.BaseSelector, fileobj: Any, cap: Capture, which: str,
               limits: Limits) -> None:
    fd = fileobj.fileno()
    chunk = os.read(fd, 1 << 16)
    if not chunk:
        sel.unregister(fileobj)
        return
    _append(cap, which, chunk, limits)


def _append(cap: Capture, which: str, chunk: bytes, limits: Limits) -> None:
    buf, limit = (cap.stdout, limits.stdout_bytes) if which == "out" else (cap.stderr, limits.stderr_bytes)
    if which == "out" and len(buf) + len(chunk) > limit:
        cap.over_limit = True
    buf.extend(chunk[: max(0, limit - len(buf))])


def _drain(proc: subprocess.Popen[bytes], cap: Capture, limits: Limits) -> None:
    """After exit, read what is already buffered in the pipes without waiting for stragglers."""
    for stream, which in ((proc.stdout, "out"), (proc.stderr, "err")):
        assert stream is not None
        os.set_blocking(stream.fileno(), False)
        while True:
            try:
                chunk = os.read(stream.fileno(), 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            _append(cap, which, chunk, limits)
            if cap.over_limit:
                break


def run_command(argv: list[str], stdin: bytes, env: dict[str, str], limits: Limits, backend: str,
                cwd: str | None = None, signal_offset: int = 0, pass_fds: tuple[int, ...] = (),
                uid: int | None = None, cgroup: RunCgroup | None = None) -> ExecutionResult:
    """Run ``argv`` in a new session; always returns a result, never leaves a process running.

    ``signal_offset``: wrappers such as bwrap report a child killed by signal N as exit code
    ``signal_offset + N`` (bwrap: 128); 0 means only negative return codes are signals.
    ``uid``: the run's own uid; all its processes are killed and its temp files removed afterwards.
    ``cgroup``: the run's cgroup (:mod:`curriculum.sandbox.cgroup`); the command joins it before it
    starts anything, every process in it is killed afterwards and it is removed (also on failure).
    """
    started = time.monotonic()
    try:
        try:
            proc = subprocess.Popen([*(cgroup.join_argv() if cgroup else []), *argv], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                                    start_new_session=True, close_fds=True, pass_fds=pass_fds)
        except OSError as err:
            return ExecutionResult("error", "", "", None, 0.0, 0.0, f"could not start sandbox: {err}", backend,
                                   {"infra": True})
        try:
            cap = _pump(proc, stdin, limits, started + limits.wall_s)
        finally:
            usage = _end_run(proc, uid, cgroup)
        oom_kills = cgroup.oom_kills() if cgroup else 0
    finally:
        if cgroup is not None:
            cgroup.remove()
    wall_s = time.monotonic() - started
    cpu_s = usage.ru_utime + usage.ru_stime
    stdout = cap.stdout.decode("utf-8", errors="replace")
    stderr = cap.stderr.decode("utf-8", errors="replace")
    if cgroup is not None and proc.returncode == 125 and JOIN_FAILED in stderr:
        return ExecutionResult("error", stdout, stderr, 125, wall_s, cpu_s, stderr.strip()[:300], backend,
                               {"infra": True})
    status_, reason = classify(proc.returncode, cap, stderr, cpu_s, limits, signal_offset, wall_s)
    if oom_kills and status_ in ("killed", "error"):
        status_, reason = "memory", (f"memory limit of all processes together ({limits.memory_mb} MiB, cgroup) "
                                     f"exceeded: {oom_kills} OOM kill(s)")
    meta: dict[str, object] = {"cgroup_oom_kills": oom_kills} if cgroup is not None else {}
    return ExecutionResult(status_, stdout, stderr, proc.returncode, wall_s, cpu_s, reason, backend, meta)


def _end_run(proc: subprocess.Popen[bytes], uid: int | None, cgroup: RunCgroup | None) -> Any:
    """Kill every process of the run, reap the command (``proc.returncode``), remove the uid's temp
    files; the command's resource usage."""
    _kill_group(proc.pid)
    if cgroup is not None:
        cgroup.kill()
    if uid is not None:
        kill_uid(uid)
    _, status, usage = os.wait4(proc.pid, 0)
    if uid is not None:
        remove_files_of_uid(uid)
    proc.returncode = os.waitstatus_to_exitcode(status)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return usage


def _signal_of(returncode: int, signal_offset: int) -> int | None:
    if returncode < 0:
        return -returncode
    if signal_offset and returncode > signal_offset and returncode - signal_offset < 65:
        return returncode - signal_offset
    return None


def classify(returncode: int, cap: Capture, stderr: str, cpu_s: float, limits: Limits,
             signal_offset: int = 0, wall_s: float = 0.0) -> tuple[Status, str | None]:
    """Map how the process ended to a status and a human-readable reason.

    Under bubblewrap the grandchild's CPU time is not visible in ``wait4`` usage, so a SIGKILL
    after at least ``cpu_s`` seconds of wall time also counts as the CPU limit.
    """
    if cap.over_limit:
        return "output_limit", f"stdout exceeded {limits.stdout_bytes} bytes"
    if cap.timed_out:
        return "timeout", f"wall-clock limit of {limits.wall_s}s exceeded"
    sig = _signal_of(returncode, signal_offset)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and max(cpu_s, wall_s) >= limits.cpu_s):
        return "timeout", f"CPU limit of {limits.cpu_s}s exceeded"
    if "MemoryError" in stderr[-4000:] or "Cannot allocate memory" in stderr[-4000:]:
        return "memory", f"address-space limit of {limits.memory_mb} MiB exceeded"
    if sig is not None:
        return "killed", f"killed by signal {signal.Signals(sig).name}"
    if returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        return "error", f"exit code {returncode}: {last[:300]}"
    return "ok", None
