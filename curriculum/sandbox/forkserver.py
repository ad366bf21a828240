"""Batch fork server: runs inside the sandbox (standard library only), one fresh child per program.

Protocol. stdin carries one JSON object::

    {"programs": [{"id": str, "code": str, "func": "f", "inputs": [...], "order": [...]}, ...],
     "call_timeout_s": 1.0, "max_output_chars": 1000000, "stop_on_failure": true, "hash_seed": 0}

``hash_seed`` (optional) fixes the string-hash seed, so set and dict orders of strings are the same
in every run that uses it (validity's gold run and grading use 0). The bubblewrap and rlimit
backends start this interpreter with it; elsewhere (docker) :func:`read_payload` re-executes it.

The parent (this process) has the standard library already imported, so the per-program cost is a
``fork``, not an interpreter start-up. For every program it:

1. creates a pipe that belongs to that program alone and forks a child; the child points
   stdin/stdout/stderr at /dev/null, closes every other descriptor (the parent's result stream
   and the OOM counter included: up to the highest one open at start, :func:`close_bound`, not
   just up to the descriptor limit) and runs :func:`curriculum.sandbox.harness.run_program`, writing its records to the
   pipe;
2. reads the pipe until end-of-file under a deadline and an output budget, then kills every
   descendant the child left behind (this process is a child subreaper, so descendants that
   called ``setsid`` or were orphaned come back to it and are found), and empties the writable
   directories (the private temp dir, and files of this sandbox's uid in /tmp, /var/tmp, /dev/shm)
   so nothing a program left behind reaches the next one;
3. checks every line read: JSON, naming this program, a valid input index not seen before, one
   final ``program`` record. Anything else marks the program ``tampering``; the records the parent
   forwards on its own stdout (a descriptor no child holds) are rebuilt from the checked values.

The parent is non-dumpable (``PR_SET_DUMPABLE`` 0), so children running as the same uid cannot
open its memory or descriptors through /proc; the seccomp filter installed by the backend denies
``ptrace`` and ``process_vm_*``. A program can still kill or stop the parent (same uid): the batch
process then ends and :class:`curriculum.sandbox.batch.BatchRunner` attributes the failure to the
program that was running. A program can also write its own pipe and so misreport its own outputs;
it cannot write another program's results.

Where the run has a cgroup (:mod:`curriculum.sandbox.cgroup`), the host passes a read-only
descriptor of its OOM-kill counter (``$PROPEL_OOM_FD``); children raise their ``oom_score_adj`` so
the kernel's OOM killer picks the candidate, not this process, and an OOM kill while a program ran
makes that program ``memory``.

Program statuses sent to the host: ``ok``, ``error``, ``timeout``, ``killed``, ``memory``,
``output_limit``, ``tampering``. The last line is ``{"kind": "done", "protections": {...},
"reexecuted_for_hash_seed": bool}``.
"""

import contextlib
import gc
import json
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # see harness.py: no typing import in the sandboxed parent
if TYPE_CHECKING:
    from typing import Any
else:
    Any = object

with contextlib.suppress(ImportError):  # inside the sandbox harness.py's source is prepended instead
    from curriculum.sandbox.harness import json_line, prepare, run_program

#: Per-run sandbox uids start here (see ``curriculum.sandbox.backends.run_uid``); a process with
#: such a uid owns nothing on the host but this run's files, so it may delete them.
SANDBOX_UID_MIN = 1 << 30
CALL_STATUSES = frozenset({"ok", "error", "timeout", "memory", "unserialisable", "output_limit", "skipped"})
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")
#: Inode times come from a coarse clock (one tick; whole seconds on some file systems): a directory
#: whose ctime is younger than the candidate's start less this margin counts as changed.
CTIME_MARGIN_NS = 1_100_000_000
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36


def harden() -> dict[str, bool]:
    """Make this process non-dumpable and a child subreaper; report which calls succeeded."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return {"non_dumpable": libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0,
                "subreaper": libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0}
    except (ImportError, OSError, AttributeError):
        return {"non_dumpable": False, "subreaper": False}


def _children() -> list[int]:
    pid = os.getpid()
    try:  # raw descriptors, not open(): fewer objects touched per candidate (each page written costs a fault)
        fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY)
        try:
            return [int(p) for p in os.read(fd, 1 << 16).split()]
        finally:
            os.close(fd)
    except OSError:
        pass
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry))
    return kids


def reap_descendants() -> int:
    """SIGKILL and reap every descendant (orphans come back to this subreaper); returns the count."""
    killed = 0
    for _ in range(10_000):
        kids = _children()
        if not kids:
            break
        for kid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(kid, signal.SIGKILL)
        for kid in kids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(kid, 0)
        killed += len(kids)
    return killed


def _run_tool(argv: list[str]) -> None:
    with contextlib.suppress(OSError, ChildProcessError):
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"})
        os.waitpid(pid, 0)


def _changed_since(path: str, since_ns: int) -> bool:
    """Whether entries may have been added to or removed from directory ``path`` since
    ``since_ns`` (wall clock): its ctime (set by the kernel on every change of the directory; unlike
    the mtime, no program can set it back) is not older than that, less a margin for the coarse
    clocks inodes are stamped with. Missing directories have nothing to remove."""
    try:
        return os.stat(path).st_ctime_ns >= since_ns - CTIME_MARGIN_NS
    except OSError:
        return False


def scrub_writable(since_ns: int = 0) -> None:
    """Empty the private temp dir (the cwd when it is $TMPDIR) and remove this uid's entries in the
    shared temp dirs (only for per-run uids, which own nothing else). Directories not changed since
    ``since_ns`` (the candidate's start) are not listed. Plain files are unlinked here (no new
    process: under a full cgroup that is what frees the memory); what remains goes to ``chmod``/``rm``."""
    doomed: list[str] = []
    cwd = os.getcwd()
    if os.environ.get("TMPDIR") == cwd and _changed_since(cwd, since_ns):
        with contextlib.suppress(OSError):
            doomed += [os.path.join(cwd, name) for name in os.listdir(cwd)]
    uid = os.getuid()
    for shared in SHARED_TMP if uid >= SANDBOX_UID_MIN else ():
        if not _changed_since(shared, since_ns):
            continue
        with contextlib.suppress(OSError):
            for entry in os.scandir(shared):
                if entry.path != cwd and entry.stat(follow_symlinks=False).st_uid == uid:
                    doomed.append(entry.path)
    left = []
    for path in doomed:
        try:
            os.unlink(path)
        except OSError:
            left.append(path)
    if left:  # directories, or files made undeletable: chmod first, then rm -rf
        _run_tool(["/usr/bin/chmod", "-R", "u+rwx", "--", *left])
        _run_tool(["/usr/bin/rm", "-rf", "--one-file-system", "--", *left])


def _child(prog: dict[str, Any], write_fd: int, settings: dict[str, Any]) -> None:
    """Runs in the forked child; never returns."""
    try:
        for target in (0, 1, 2):  # the server's /dev/null: no open() per candidate
            os.dup2(settings["null_fd"], target)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, max(write_fd + 2, settings["open_max"]))
        if settings["oom_fd"] is not None:  # under a cgroup limit the OOM killer picks candidates first
            with contextlib.suppress(OSError):
                fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
                try:
                    os.write(fd, b"1000")
                finally:
                    os.close(fd)

        lines: list[str] = []

        def emit(record: dict[str, Any]) -> None:
            lines.append(json_line(record))
            if record["kind"] == "program":  # one write at the end: one wake-up for the parent
                data = memoryview("".join(lines).encode())
                while data:
                    data = data[os.write(write_fd, data):]

        run_program(prog, settings["call_timeout_s"], settings["max_output_chars"], emit,
                    settings["stop_on_failure"])
    finally:
        os._exit(0)


def _read_child(pid: int, read_fd: int, deadline: float, budget: int) -> tuple[bytes, str | None, int | None]:
    """What the child's pipe delivers until EOF, the failure (``timeout``/``output_limit``) and the
    child's wait status once it has been reaped."""
    data = bytearray()
    status: int | None = None
    poller = select.poll()
    pidfd = os.pidfd_open(pid)
    poller.register(read_fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(data), "timeout", status
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:  # the child is gone: its descendants may hold the pipe open
                    poller.unregister(pidfd)
                    status = os.waitpid(pid, 0)[1]
                    if reap_descendants():
                        continue
                    return bytes(data) + _read_rest(read_fd, budget - len(data)), None, status
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    return bytes(data), None, status
                data += chunk
                if len(data) > budget:
                    return bytes(data), "output_limit", status
    finally:
        os.close(pidfd)


def _read_rest(read_fd: int, budget: int) -> bytes:
    """What is left in a pipe whose writers are all gone (never blocks for long)."""
    data = bytearray()
    while len(data) <= budget:
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def check_records(data: bytes, prog: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str | None]:
    """The call records and program record in a child's output, or why it is tampering."""
    calls: dict[int, dict[str, Any]] = {}
    final: dict[str, Any] | None = None
    n = len(prog["inputs"])
    for line in data.split(b"\n")[:-1]:  # a last, unterminated line is a write cut short by a kill
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return [], None, "a result line is not JSON"
        if not isinstance(rec, dict) or rec.get("id") != prog["id"]:
            other = rec.get("id") if isinstance(rec, dict) else None
            return [], None, f"a result line names another program ({str(other)[:40]!r})"
        if final is not None:
            return [], None, "result lines after the program's final record"
        if rec.get("kind") == "program" and rec.get("status") in ("ok", "error"):
            final = {"kind": "program", "id": prog["id"], "status": rec["status"],
                     "error": None if rec.get("error") is None else str(rec["error"])}
            continue
        i = rec.get("i")
        if rec.get("kind") != "call" or type(i) is not int or not 0 <= i < n or i in calls:
            return [], None, "a result line has an unknown kind or a bad or repeated input index"
        if rec.get("status") not in CALL_STATUSES or not all(
                rec.get(k) is None or type(rec.get(k)) is str for k in ("output", "error")):
            return [], None, "a call record has an unknown status or non-text output"
        calls[i] = {"kind": "call", "id": prog["id"], "i": i, "status": rec["status"],
                    "output": rec.get("output"), "error": rec.get("error")}
    return list(calls.values()), final, None


def _exit_reason(status: int) -> tuple[str, str]:
    code = os.waitstatus_to_exitcode(status)
    if code == -signal.SIGXCPU:
        return "timeout", "CPU limit exceeded (SIGXCPU)"
    if code < 0:
        return "killed", f"killed by signal {signal.Signals(-code).name}"
    if code != 0:
        return "error", f"the program's process exited with code {code}"
    return "error", "the program's process ended without reporting"


def oom_kills(fd: int | None) -> int:
    """The run cgroup's OOM-kill count (``oom_kill N`` in the file behind ``fd``; 0 without one)."""
    if fd is None:
        return 0
    try:
        text = os.pread(fd, 4096, 0).decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def run_isolated(prog: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one program in its own child; the checked records to forward to the host. An OOM kill
    in the run's cgroup while it ran (``settings["oom_fd"]``) makes it ``memory``."""
    oom_before = oom_kills(settings["oom_fd"])
    records = _run_child(prog, settings)
    oom = oom_kills(settings["oom_fd"]) - oom_before
    if oom > 0:
        return [{"kind": "program", "id": prog["id"], "status": "memory",
                 "error": f"memory limit of all processes together exceeded (cgroup): {oom} OOM kill(s)"}]
    return records


def _run_child(prog: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    n = len(prog["inputs"])
    timeout_s = settings["call_timeout_s"]
    allowed_s = timeout_s * (2 * n + 1) + 1.0
    deadline = time.monotonic() + allowed_s
    budget = (settings["max_output_chars"] * 6 + 4096) * (n + 1)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(prog, write_fd, settings)
    os.close(write_fd)
    status: int | None = None
    try:
        data, failure, status = _read_child(pid, read_fd, deadline, budget)
    finally:
        os.close(read_fd)
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
            reap_descendants()
    calls, final, tampering = check_records(data, prog)
    end = {"kind": "program", "id": prog["id"]}
    if tampering:
        return [{**end, "status": "tampering", "error": tampering}]
    if failure == "timeout":
        return [{**end, "status": "timeout", "error": f"program exceeded its {allowed_s:g}s deadline"}]
    if failure == "output_limit":
        return [{**end, "status": "output_limit", "error": f"program wrote more than {budget} bytes of results"}]
    if final is None:
        kind, reason = _exit_reason(status)
        return [{**end, "status": kind, "error": reason}]
    return [*calls, final]


def lowered(fd: int) -> int:
    """``fd`` moved to the lowest free descriptor number (below ``RLIMIT_NOFILE``: a descriptor the
    host passed keeps the host's number, which may lie above the sandbox's limit)."""
    try:
        low = os.dup(fd)
    except OSError:
        return fd
    if low < fd:
        os.close(fd)
        return low
    os.close(low)
    return fd


def close_bound() -> int:
    """One past the highest descriptor a child may have inherited: ``SC_OPEN_MAX`` (the sandbox's
    ``RLIMIT_NOFILE``) does not bound the numbers of descriptors passed in from the host — a run
    cgroup's OOM counter opened by a daemon with many open files came in as descriptor 104 under a
    limit of 64 and stayed open in every candidate (#37) — so the open ones are counted once here;
    every descriptor this process opens later gets a number below the limit."""
    highest = -1
    with contextlib.suppress(OSError, ValueError):
        highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    return max(os.sysconf("SC_OPEN_MAX"), highest + 1)


PAYLOAD_ENV = "PROPEL_PAYLOAD_FILE"
#: Descriptor of the run cgroup's OOM-kill counter (``curriculum.sandbox.cgroup.OOM_FD_ENV``).
OOM_FD_ENV = "PROPEL_OOM_FD"


def read_payload() -> dict[str, Any]:
    """The batch from stdin; when it asks for a ``hash_seed`` this interpreter was not started with
    (a backend that cannot pass it: docker), the payload is parked in the private working directory
    and the interpreter re-executes itself with ``PYTHONHASHSEED`` set (``-s -P`` instead of
    ``-I``: the environment is already scrubbed). The last record says whether that happened."""
    parked = os.environ.pop(PAYLOAD_ENV, None)
    if parked is not None:
        with open(parked, "rb") as fh:
            raw = fh.read()
        os.unlink(parked)
    else:
        raw = sys.stdin.buffer.read()
    payload: dict[str, Any] = json.loads(raw)
    seed = payload.get("hash_seed")
    if seed is not None and os.environ.get("PYTHONHASHSEED") != str(int(seed)):
        path = os.path.join(os.getcwd(), ".propel-payload")
        try:
            with open(path, "wb") as fh:
                fh.write(raw)
        except OSError:  # no room to park it: go on with the random seed rather than fail the batch
            return payload
        flags = ["-s", "-P", *(["-S"] if sys.flags.no_site else [])]
        code = sys.orig_argv[sys.orig_argv.index("-c") + 1]
        env = {**os.environ, "PYTHONHASHSEED": str(int(seed)), PAYLOAD_ENV: path}
        # /proc/self/exe: the interpreter's directory may not be searchable by the sandbox uid
        os.execve("/proc/self/exe", [sys.orig_argv[0], *flags, "-c", code], env)
    return payload


WARM_UP = {"id": "warm-up", "func": "f", "inputs": ["1, [2.5]", "-3, (4,)", "'a', {'k': None}"],
           "code": "def f(x, y=None):\n    return [x, {'y': y, 'n': len(str(x))}, (x,), {str(x)}, b'', 1.5]"}


def warm_up() -> None:
    """Run a trusted program through the evaluation code here, before any fork: the interpreter
    specialises that code once instead of in every child (fewer pages written per candidate)."""
    def encode(record: dict[str, Any]) -> None:
        json_line(record)

    for _ in range(8):
        run_program(dict(WARM_UP), 1.0, 10_000, encode, True)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


def main() -> None:
    reexecuted = PAYLOAD_ENV in os.environ  # read_payload removes it
    payload = read_payload()
    sys.stdin.close()
    result_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)  # also every child's stdin, stdout and stderr
    os.dup2(null, 1)
    protections = harden()
    for prog in payload["programs"]:
        prepare(prog)
    warm_up()
    gc.collect()
    gc.freeze()  # children do not copy-on-write pages just to scan the parent's objects
    oom_fd = os.environ.pop(OOM_FD_ENV, None)
    settings = {"oom_fd": lowered(int(oom_fd)) if oom_fd and oom_fd.isdigit() else None,
                "null_fd": null, "open_max": close_bound(),
                "call_timeout_s": float(payload.get("call_timeout_s", 1.0)),
                "max_output_chars": int(payload.get("max_output_chars", 1_000_000)),
                "stop_on_failure": bool(payload.get("stop_on_failure", True))}

    def emit(records: list[dict[str, Any]]) -> None:  # one write per program
        data = memoryview("".join(json_line(record) for record in records).encode())
        while data:
            data = data[os.write(result_fd, data):]

    for prog in payload["programs"]:
        started_ns = time.time_ns()
        emit(run_isolated(prog, settings))
        scrub_writable(started_ns)
    emit([{"kind": "done", "protections": protections, "reexecuted_for_hash_seed": reexecuted}])


if __name__ == "__main__":
    main()
