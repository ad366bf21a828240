"""Catalogue of sandbox escape attempts — the cases ``test_escapes.py`` does not already cover.

Already covered there (not repeated here): infinite loop, sleep past the wall clock, bounded and
unbounded fork bombs, memory hog, huge output, environment secrets (``os.environ`` and
``/proc/*/environ``), recursion bomb, a loopback listener, writes outside ``/tmp`` (incl. the test
directory), the host filesystem being hidden, rlimit-as-root writes, ``__import__``/``os.system``.

Each attempt below prints ``ESCAPED …`` if it got through and ``BLOCKED <reason>`` when the
kernel/sandbox refused it; the test requires no ``ESCAPED`` and a reason: either the program's
``BLOCKED`` line or the sandbox's own classification (``status`` + ``reason``). Host-side checks
(files, processes, the test process itself) confirm nothing changed. The rlimit backend declares
itself weaker (no fs/network isolation), so network and filesystem-isolation cases run on
bubblewrap only; rlimit cases run as root (where it drops to ``nobody``), since unprivileged it runs
as the invoking user — see ``docs/SANDBOX.md``.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from curriculum.sandbox import BubblewrapSandbox, Limits, RlimitSandbox
from curriculum.sandbox.base import ExecutionResult
from tests.unit.sandbox.test_escapes import BWRAP_OK, BWRAP_REASON, IS_ROOT

PROJECT = Path(__file__).resolve().parents[3]
HOST_PID = os.getpid()
TOKEN = str(uuid.uuid4().int)[:8]  # digits: also used as a `sleep` duration
LIMITS = Limits(cpu_s=2, wall_s=4.0, memory_mb=512, max_procs=16, file_size_mb=4, tmpfs_mb=16)
BOTH, BWRAP = ("bubblewrap", "rlimit"), ("bubblewrap",)

TRY = ("def attempt(what, fn):\n    try:\n        fn()\n        print('ESCAPED', what)\n"
       "    except BaseException as err:\n"
       "        print('BLOCKED', what, type(err).__name__, getattr(err, 'errno', ''))\n")


@dataclass(frozen=True)
class Attempt:
    name: str
    code: str
    backends: tuple[str, ...] = BOTH
    host_check: Callable[[], None] | None = None
    known_gap: tuple[tuple[str, str], ...] = ()  # (backend, why): an escape we document, xfail(strict)


def _connect(host: str, port: int, family: str = "AF_INET") -> str:
    return (f"import socket\n{TRY}s = socket.socket(socket.{family}, socket.SOCK_STREAM)\ns.settimeout(1)\n"
            f"attempt('connect {host}:{port}', lambda: s.connect(({host!r}, {port})))\n")


def _no_file(path: Path) -> Callable[[], None]:
    def check() -> None:
        assert not path.exists(), f"{path} was created by sandboxed code"
    return check


def _no_leftover_process() -> None:
    time.sleep(0.5)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"7.{TOKEN}".encode() in cmd.replace(b"\0", b" ") and b"sleep" in cmd:
            os.kill(int(pid), signal.SIGKILL)
            pytest.fail(f"a detached child (pid {pid}) outlived its sandbox run")


CATALOGUE = [
    Attempt("metadata_endpoint_169_254_169_254", _connect("169.254.169.254", 80), BWRAP),
    Attempt("host_postgres_on_loopback", _connect("127.0.0.1", 5432), BWRAP),
    Attempt("host_redis_on_loopback", _connect("127.0.0.1", 6379), BWRAP),
    Attempt("ipv6_loopback", _connect("::1", 5432, "AF_INET6"), BWRAP),
    Attempt("dns_lookup", f"import socket\n{TRY}attempt('dns', lambda: socket.getaddrinfo('pypi.org', 443))\n", BWRAP),
    Attempt("host_unix_socket_postgres",
            f"import socket\n{TRY}s = socket.socket(socket.AF_UNIX)\n"
            "attempt('unix', lambda: s.connect('/var/run/postgresql/.s.PGSQL.5432'))\n", BWRAP),
    Attempt("read_etc_shadow", f"{TRY}attempt('shadow', lambda: print(open('/etc/shadow').read()[:20]))\n"),
    Attempt("proc_1_root_traversal",
            f"{TRY}attempt('proc root', lambda: open('/proc/1/root{PROJECT}/pyproject.toml').read())\n"),
    Attempt("proc_host_pid_mem", f"{TRY}attempt('mem', lambda: open('/proc/{HOST_PID}/mem', 'rb').read(1))\n"),
    Attempt("proc_sys_write", f"{TRY}attempt('sysctl', lambda: open('/proc/sys/vm/drop_caches', 'w').write('1'))\n"),
    Attempt("signal_host_test_process",
            f"import os, signal\n{TRY}attempt('kill host', lambda: os.kill({HOST_PID}, signal.SIGKILL))\n"
            "attempt('kill parent', lambda: os.kill(os.getppid(), signal.SIGKILL))\n"),
    Attempt("signal_everyone_kill_minus_1",
            f"import os, signal\n{TRY}attempt('kill -1', lambda: os.kill(-1, signal.SIGKILL))\n", BWRAP),
    Attempt("ctypes_setuid_mount_ptrace",
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "def chk(what, rc):\n    print(('ESCAPED' if rc == 0 else 'BLOCKED'), what, ctypes.get_errno())\n"
            "chk('setuid0', libc.setuid(0))\n"
            "chk('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))\n"
            f"chk('ptrace', libc.ptrace(16, {HOST_PID}, None, None))\n"),
    Attempt("thread_bomb",
            "import threading, time\nts = []\ntry:\n    for _ in range(5000):\n"
            "        t = threading.Thread(target=time.sleep, args=(5,), daemon=True)\n        t.start()\n"
            "        ts.append(t)\n    print('ESCAPED threads', len(ts))\n"
            "except RuntimeError as err:\n    print('BLOCKED threads', len(ts), err)\n"),
    Attempt("disk_fill_single_file",
            f"{TRY}def fill():\n    with open('/tmp/fill-{TOKEN}', 'wb') as f:\n"
            "        for _ in range(64):\n            f.write(b'x' * 1024 * 1024)\n"
            "attempt('file size', fill)\n", BWRAP),
    Attempt("disk_fill_many_files",
            f"{TRY}def fill():\n    for i in range(64):\n        with open(f'/tmp/f{{i}}', 'wb') as f:\n"
            "            f.write(b'x' * 3 * 1024 * 1024)\n"
            "attempt('tmpfs quota', fill)\n", BWRAP),
    Attempt("import_project_module",
            f"import sys\nsys.path.insert(0, {str(PROJECT)!r})\n{TRY}"
            "attempt('import daemon.config', lambda: __import__('daemon.config'))\n", BWRAP),
    Attempt("import_by_file_location",
            f"import importlib.util\n{TRY}def load():\n"
            f"    spec = importlib.util.spec_from_file_location('c', {str(PROJECT / 'daemon' / 'config.py')!r})\n"
            "    importlib.util.module_from_spec(spec).__loader__.exec_module(importlib.util.module_from_spec(spec))\n"
            "attempt('spec_from_file_location', load)\n", BWRAP),
    Attempt("write_project_root",
            f"{TRY}attempt('write', lambda: open({str(PROJECT / ('ESCAPED-' + TOKEN))!r}, 'w').write('x'))\n",
            host_check=_no_file(PROJECT / f"ESCAPED-{TOKEN}")),
    Attempt("detached_daemon_outlives_run",
            "import os\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '7.{TOKEN}'])\n    os._exit(0)\n"
            "os.waitpid(pid, 0)\nprint('BLOCKED detach: checked by the host after the run')\n",
            host_check=_no_leftover_process),
    Attempt("abstract_unix_socket",
            f"import socket\n{TRY}s = socket.socket(socket.AF_UNIX)\n"
            f"attempt('abstract', lambda: s.connect('\\0propel-escape-{TOKEN}'))\n", BWRAP),
]


def _cases() -> Iterator[object]:
    for att in CATALOGUE:
        for backend in att.backends:
            marks = []
            if backend == "bubblewrap" and not BWRAP_OK:
                marks.append(pytest.mark.skip(reason=f"bubblewrap unusable: {BWRAP_REASON}"))
            if backend == "rlimit" and not IS_ROOT:
                marks.append(pytest.mark.skip(reason="rlimit backend only drops to nobody when started as root"))
            marks += [pytest.mark.xfail(strict=True, reason=why) for b, why in att.known_gap if b == backend]
            yield pytest.param(att, backend, id=f"{att.name}-{backend}", marks=marks)


def _run(backend: str, code: str) -> ExecutionResult:
    sandbox = BubblewrapSandbox(LIMITS) if backend == "bubblewrap" else RlimitSandbox(LIMITS)
    return sandbox.run_python(code)


@pytest.mark.parametrize(("attempt", "backend"), list(_cases()))
def test_escape_attempt_is_contained(attempt: Attempt, backend: str) -> None:
    result = _run(backend, attempt.code)
    blocked = [ln for ln in result.stdout.splitlines() if ln.startswith("BLOCKED")]
    reason = "; ".join(blocked) or f"{result.status}: {result.reason}"
    print(f"{attempt.name} [{backend}] contained — {reason}")
    assert "ESCAPED" not in result.stdout, result.log_view()
    assert blocked or (result.status != "ok" and result.reason), result.log_view()
    assert os.getpid() == HOST_PID  # the test process is alive and unchanged
    if attempt.host_check is not None:
        attempt.host_check()


def test_catalogue_has_at_least_fifteen_distinct_attempts() -> None:
    assert len({a.name for a in CATALOGUE}) >= 15


@pytest.fixture(autouse=True)
def _abstract_listener() -> Iterator[None]:
    """Nothing in the catalogue may reach a host abstract unix socket (net-namespace isolation)."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(f"\0propel-escape-{TOKEN}")
    srv.listen(1)
    srv.settimeout(0)
    try:
        yield
    finally:
        try:
            conn, _ = srv.accept()
            conn.close()
            pytest.fail("sandboxed code connected to a host abstract unix socket")
        except BlockingIOError:
            pass
        srv.close()

