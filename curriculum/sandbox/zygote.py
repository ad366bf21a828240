"""The zygote: the one process of a batch run that forks candidates (standard library only).

:mod:`curriculum.sandbox.forkserver` (the server) compiles the batch and warms up the evaluation
code, then forks the zygote once and never forks again. A ``fork`` write-protects every page of
the forking process, and each page that process writes afterwards costs it a copy-on-write fault
(about 5 us on this VM): the server writes some 200 pages per candidate (reading, checking and
forwarding results, listing /proc, scrubbing temp dirs), the zygote only the few its loop touches.

Protocol over a ``SOCK_SEQPACKET`` socket pair (one message per send): the server sends a
program's index; the zygote creates a pipe that belongs to that program alone, forks the child
(:func:`run_child`: it closes every descriptor but the pipe's write end, the zygote's socket
included, and writes its records there), replies with the child's pid and passes the pipe's read
end and a pidfd of the child (``SCM_RIGHTS``), keeping neither, then reaps the child and sends its
wait status. The zygote is not a child subreaper, so whatever the child leaves behind is
reparented to the server, which kills it as before.

A candidate runs as the same uid as the zygote, so it can kill or stop it (it cannot trace it or
open its memory or descriptors: the zygote inherits the server's non-dumpable flag, and seccomp
denies ``ptrace``). The server notices (the socket ends, a reply does not come by the candidate's
deadline, or ``waitpid`` after the candidate says stopped or gone), kills the zygote, gives the
candidate the verdict ``killed`` and, for the next program, forks a fresh zygote from itself: the
server never runs candidate code, so the new zygote starts as clean as the first.
"""

import _socket  # not ``socket``: its enums and selectors would grow the server and so every fork
import contextlib
import json
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # see harness.py: no typing import in the sandboxed processes
if TYPE_CHECKING:
    from typing import Any
else:
    Any = object

with contextlib.suppress(ImportError):  # inside the sandbox harness.py's source is prepended instead
    from curriculum.sandbox.harness import run_program

#: How long past the candidate's deadline the zygote still gets to answer (a loaded machine).
ZYGOTE_GRACE_S = 1.0
_FD_BYTES = 4  # a descriptor in an SCM_RIGHTS message (C int)


def run_child(prog: dict[str, Any], write_fd: int, settings: dict[str, Any]) -> None:
    """Runs in the forked child; never returns."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, max(write_fd + 2, os.sysconf("SC_OPEN_MAX")))
        if settings["oom_fd"] is not None:  # under a cgroup limit the OOM killer picks candidates first
            with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")

        lines: list[str] = []

        def emit(record: dict[str, Any]) -> None:
            lines.append(json.dumps(record) + "\n")
            if record["kind"] == "program":  # one write at the end: one wake-up for the server
                data = memoryview("".join(lines).encode())
                while data:
                    data = data[os.write(write_fd, data):]

        run_program(prog, settings["call_timeout_s"], settings["max_output_chars"], emit,
                    settings["stop_on_failure"])
    finally:
        os._exit(0)


def serve_zygote(sock: Any, programs: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """The zygote's loop: one child per request, until the server closes its end."""
    while True:
        request = sock.recv(32)
        if not request:
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            run_child(programs[int(request)], write_fd, settings)
        os.close(write_fd)
        pidfd = os.pidfd_open(pid)
        fds = read_fd.to_bytes(_FD_BYTES, sys.byteorder) + pidfd.to_bytes(_FD_BYTES, sys.byteorder)
        sock.sendmsg([b"%d" % pid], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        os.close(read_fd)
        os.close(pidfd)
        sock.send(b"%d" % os.waitpid(pid, 0)[1])


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    return [int.from_bytes(data[i:i + _FD_BYTES], sys.byteorder)
            for level, kind, data in ancillary if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS)
            for i in range(0, len(data) - len(data) % _FD_BYTES, _FD_BYTES)]


def _describe(status: int) -> str:
    if os.WIFSTOPPED(status):
        return f"stopped by signal {signal.Signals(os.WSTOPSIG(status)).name}"
    code = os.waitstatus_to_exitcode(status)
    return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


class Zygote:
    """The server's handle on its zygote: starts it, asks it for children, notices when a candidate
    killed or stopped it (``lost`` then says how) and starts a fresh one on the next request."""

    def __init__(self, programs: list[dict[str, Any]], settings: dict[str, Any]) -> None:
        self.programs, self.settings = programs, settings
        self.pid: int | None = None
        self.sock: Any = None
        self.lost: str | None = None

    def start(self) -> None:
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                keep = theirs.fileno()  # nothing else: not the server's result stream, not the OOM counter
                os.closerange(3, keep)
                os.closerange(keep + 1, max(keep + 2, os.sysconf("SC_OPEN_MAX")))
                serve_zygote(theirs, self.programs, self.settings)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.sock, self.lost = pid, ours, None

    def spawn(self, index: int, deadline: float) -> tuple[int, int] | None:
        """A fresh child running program ``index``: the read end of its pipe and its pidfd;
        ``None`` when the zygote is gone (``lost`` says why)."""
        if self.pid is None:
            self.start()
        with contextlib.suppress(OSError, ValueError):
            self.sock.send(b"%d" % index)
            if self._answers(deadline):
                msg, ancillary, _, _ = self.sock.recvmsg(32, _socket.CMSG_SPACE(2 * _FD_BYTES))
                fds = _received_fds(ancillary)
                if msg and len(fds) == 2:
                    return fds[0], fds[1]
                for fd in fds:
                    os.close(fd)
        self.kill("it did not start the program")
        return None

    def wait_status(self, deadline: float) -> int | None:
        """The wait status of the child the zygote forked last (once that has exited); ``None`` when
        the zygote is gone or does not answer by the deadline (``lost`` says why)."""
        with contextlib.suppress(OSError, ValueError):
            if self._answers(deadline):
                msg = self.sock.recv(32)
                if msg:
                    return int(msg)
        self.kill("it did not report the program's exit")
        return None

    def check(self) -> str | None:
        """After a candidate and its descendants are gone: why the zygote is unusable (a candidate
        stopped or killed it: it is then killed and reaped), else ``None``."""
        if self.pid is not None:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            if pid:
                self._end(status)
        return self.lost

    def kill(self, what: str) -> None:
        """SIGKILL and reap the zygote (its children come to the server); ``lost`` says what
        happened to it: stopped or ended (what ``waitpid`` says), else ``what``."""
        if self.pid is not None:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            self._end(status if pid else None, what)

    def _end(self, status: int | None, what: str = "") -> None:
        """Forget the zygote; ``status``: stopped, or ended and already reaped; ``None``: running."""
        assert self.pid is not None
        state = f"it was {_describe(status)}" if status is not None else what
        if status is None or os.WIFSTOPPED(status):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            ended = os.waitpid(self.pid, 0)[1]
            if status is None:  # still running, or ending (its socket closes before it is a zombie)
                state = f"{what} ({_describe(ended)})"
        self.sock.close()
        self.pid, self.sock = None, None
        self.lost = f"the program stopped or killed the zygote (the process that forks candidates): {state}"

    def stop(self) -> None:
        """End the zygote after the batch: it exits when its socket closes (killed after a grace)."""
        if self.pid is None:
            return
        self.sock.close()
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(self.pid)
            select.select([pidfd], [], [], ZYGOTE_GRACE_S)
            os.close(pidfd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self.pid, self.sock = None, None

    def _answers(self, deadline: float) -> bool:
        timeout = max(deadline, time.monotonic() + ZYGOTE_GRACE_S) - time.monotonic()
        return bool(select.select([self.sock], [], [], timeout)[0])
