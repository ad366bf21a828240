"""Catalogue of hostile candidates in a batch, one test each, grouped by what they attack.

Every case runs as the middle program of a three-program batch through :class:`BatchRunner` on
every backend available (bubblewrap, rlimit); it asserts the hostile program's specific verdict and
that its neighbours (one before, one after) got their correct outputs. After every test no process
of a per-run sandbox uid is alive and no file of one is left in /tmp, /var/tmp or /dev/shm
(checked as root, where runs get their own uid), and no run cgroup is left. Cases a backend does not contain are strict
xfails with the reason (see ``docs/SANDBOX.md``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from curriculum.sandbox import BatchRunner, BubblewrapSandbox, Limits, Program, ProgramResult, RlimitSandbox
from curriculum.sandbox.batch import compare_runs
from curriculum.sandbox.cgroup import leftover_cgroups
from testkit.waiting import eventually
from tests.unit.sandbox.test_escapes import BWRAP_OK, BWRAP_REASON, IS_ROOT, ours

PROJECT = Path(__file__).resolve().parents[3]
LIMITS = Limits(cpu_s=4, wall_s=8.0, memory_mb=256, max_procs=8, file_size_mb=4, tmpfs_mb=8)
PURE = "def f(x):\n    return x * x"
_LISTENER = socket.socket()  # a host service on loopback, alive for the whole module
_LISTENER.bind(("127.0.0.1", 0))
_LISTENER.listen(8)
PORT = _LISTENER.getsockname()[1]


@dataclass(frozen=True)
class Verdict:
    """What the hostile program's result must show: program status, first call status, and a
    substring of its reason or first call's error/output."""

    status: str = "ok"
    call: str | None = None
    text: str = ""


@dataclass(frozen=True)
class Hostile:
    group: str
    name: str
    code: str
    verdict: Verdict
    rlimit: Verdict | str | None = None  # another verdict on rlimit, or the reason it is an xfail
    inputs: tuple[str, ...] = ("1",)


def _fn(body: str, imports: str = "os") -> str:
    lines = "\n".join("    " + ln for ln in body.strip("\n").splitlines())
    return f"import {imports}\ndef f(x):\n{lines}\n"


CATALOGUE = [
    # --- file system -----------------------------------------------------------------------
    Hostile("filesystem", "read_working_tree", _fn(f"return open({str(PROJECT / 'pyproject.toml')!r}).read()[:20]"),
            Verdict("ok", "error", "FileNotFoundError"),
            rlimit="rlimit has no mount namespace: world-readable files (the working tree) can be read"),
    Hostile("filesystem", "write_working_tree", _fn(f"open({str(PROJECT / 'hostile-was-here')!r}, 'w').write('x')"),
            Verdict("ok", "error", "Error"),
            rlimit=Verdict("ok", "error", "PermissionError") if IS_ROOT else "not root: runs as the invoking user"),
    Hostile("filesystem", "fill_private_tmp",
            _fn("for i in range(64):\n    open(f'/tmp/fill{i}', 'wb').write(b'x' * (1 << 20))\nreturn 0"),
            Verdict("ok", "error", "No space left"),
            rlimit="rlimit has no tmpfs quota: its temp dir is on the host (files are removed after the run)"),
    Hostile("filesystem", "leave_files_in_shared_tmp",
            _fn("for d in ('/tmp', '/var/tmp'):\n    try:\n        open(d + '/hostile-left-this', 'w').write('x')\n"
                "    except OSError:\n        pass\nreturn 0"), Verdict("ok", "ok", "0")),
    Hostile("filesystem", "huge_single_file", _fn("open('big', 'wb').write(b'x' * (8 << 20))\nreturn 0"),
            Verdict("ok", "error", "File too large")),
    # --- network -------------------------------------------------------------------------
    Hostile("network", "connect_host_loopback",
            _fn(f"s = socket.create_connection(('127.0.0.1', {PORT}), timeout=1)\nreturn 'CONNECTED'", "socket"),
            Verdict("ok", "error", "Error"),
            rlimit="rlimit has no network namespace: host services on 127.0.0.1 are reachable"),
    Hostile("network", "dns_lookup", _fn("return str(socket.getaddrinfo('pypi.org', 443)[0])", "socket"),
            Verdict("ok", "error", "gaierror"), rlimit="rlimit has no network namespace"),
    # --- processes -----------------------------------------------------------------------
    Hostile("processes", "fork_and_exit", _fn("if os.fork() == 0:\n    import time\n    time.sleep(30)\nreturn x"),
            Verdict("ok", "ok", "1")),
    Hostile("processes", "setsid_daemon",
            _fn("if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execv('/bin/sleep', "
                "['sleep', '30'])\n    os._exit(0)\nreturn x"), Verdict("ok", "ok", "1")),
    Hostile("processes", "fork_bomb",
            _fn("while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
            Verdict("ok", "timeout", "exceeded")),
    Hostile("processes", "kill_the_parent", _fn("import signal\nos.kill(os.getppid(), signal.SIGKILL)\nreturn x"),
            Verdict("killed", None, "SIGKILL")),
    Hostile("processes", "kill_everything", _fn("import signal\nos.kill(-1, signal.SIGKILL)\nreturn x"),
            Verdict("killed", None, "SIGKILL")),
    Hostile("processes", "ptrace_the_parent",
            _fn("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "return (libc.ptrace(16, os.getppid(), None, None), ctypes.get_errno())"),
            Verdict("ok", "ok", "(-1, 1)")),
    Hostile("processes", "write_parent_memory", _fn("open(f'/proc/{os.getppid()}/mem', 'wb').write(b'x')"),
            Verdict("ok", "error", "PermissionError")),
    Hostile("processes", "new_namespaces",
            _fn("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "return (libc.unshare(0x10000000), ctypes.get_errno())"), Verdict("ok", "ok", "(-1, 1)")),
    # --- memory --------------------------------------------------------------------------
    Hostile("memory", "address_space", _fn("return len(bytearray(1 << 30))"), Verdict("ok", "memory", "")),
    Hostile("memory", "memfd", _fn("fd = os.memfd_create('m')\nos.ftruncate(fd, 1 << 30)\nreturn 1"),
            Verdict("ok", "error", "PermissionError")),
    Hostile("memory", "sysv_shm", _fn("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                                      "return (libc.shmget(0, 1 << 30, 0o1600), ctypes.get_errno())"),
            Verdict("ok", "ok", "(-1, 1)")),
    Hostile("memory", "posix_shm_file", _fn("open('/dev/shm/hostile', 'wb').write(b'x' * (4 << 20))\nreturn 1"),
            Verdict("ok", "error", "Error"), rlimit=Verdict("ok", "ok", "1") if IS_ROOT else "not root"),
    Hostile("memory", "many_pipes", _fn("fds = []\nwhile True:\n    fds.extend(os.pipe())"),
            Verdict("ok", "error", "Too many open files")),
    # --- time ----------------------------------------------------------------------------
    Hostile("time", "busy_loop", _fn("while True:\n    pass"), Verdict("ok", "timeout", "exceeded")),
    Hostile("time", "ignore_the_timer", _fn("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                            "while True:\n    pass"), Verdict("timeout", None, "")),
    Hostile("time", "block_the_timer", _fn("import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, "
                                           "[signal.SIGALRM])\ntime.sleep(60)"), Verdict("timeout", None, "deadline")),
    Hostile("time", "slow_definition", "import time\ntime.sleep(60)\ndef f(x):\n    return x\n",
            Verdict("error", None, "defining the code")),
    # --- result channel ------------------------------------------------------------------
    Hostile("result_channel", "forge_a_neighbour",
            _fn("rec = b'{\"kind\": \"call\", \"id\": \"after\", \"i\": 0, \"status\": \"ok\", \"output\": \"0\"}\\n'\n"
                "for fd in range(3, 64):\n    try:\n        os.write(fd, rec)\n    except OSError:\n        pass\n"
                "return x"), Verdict("tampering", None, "another program")),
    Hostile("result_channel", "repeat_own_record",
            _fn("rec = b'{\"kind\": \"call\", \"id\": \"hostile\", \"i\": 0, \"status\": \"ok\", \"output\": \"7\", "
                "\"error\": null}\\n'\nfor fd in range(3, 64):\n    try:\n        os.write(fd, rec)\n"
                "    except OSError:\n        pass\nreturn x"), Verdict("tampering", None, "repeated")),
    Hostile("result_channel", "garbage_on_every_fd",
            _fn("for fd in range(3, 64):\n    try:\n        os.write(fd, b'\\x00garbage\\n')\n    except OSError:\n"
                "        pass\nreturn x"), Verdict("tampering", None, "not JSON")),
    Hostile("result_channel", "parent_stdout_via_proc", _fn("open(f'/proc/{os.getppid()}/fd/1', 'w').write('x')"),
            Verdict("ok", "error", "PermissionError")),
    Hostile("result_channel", "prints_megabytes", _fn("import sys\nfor _ in range(64):\n    print('x' * (1 << 20))\n"
                                                      "sys.stderr.write('MemoryError' * 1000)\nreturn x", "os"),
            Verdict("ok", "ok", "1")),
    Hostile("result_channel", "closes_stdout", _fn("os.close(1)\nos.close(2)\nreturn x"), Verdict("ok", "ok", "1")),
    Hostile("result_channel", "reads_stdin", _fn("import sys\nreturn len(sys.stdin.read())"),
            Verdict("ok", "error", "closed file")),
    Hostile("result_channel", "exits_early", _fn("os._exit(0)"), Verdict("error", None, "without reporting")),
    # --- interpreter state (the neighbour after it must be unaffected) --------------------
    Hostile("interpreter_state", "poison_sys_modules",
            _fn("import sys\nsys.modules['json'] = None\nsys.modules['ast'] = None\nreturn x"),
            Verdict("ok", "ok", "1")),
    # it can break its own evaluation (repr is now len), not the neighbour's
    Hostile("interpreter_state", "patch_builtins", _fn("import builtins\nbuiltins.int = str\nbuiltins.repr = len\n"
                                                       "return x"), Verdict("ok", "error", "TypeError")),
    Hostile("interpreter_state", "atexit_forgery", _fn("import atexit\natexit.register(print, 'forged')\nreturn x"),
            Verdict("ok", "ok", "1")),
]


def _cases() -> Iterator[object]:
    for case in CATALOGUE:
        for backend in ("bubblewrap", "rlimit"):
            marks = []
            if backend == "bubblewrap" and not BWRAP_OK:
                marks.append(pytest.mark.skip(reason=f"bubblewrap unusable: {BWRAP_REASON}"))
            if backend == "rlimit" and isinstance(case.rlimit, str):
                marks.append(pytest.mark.xfail(strict=True, reason=case.rlimit))
            yield pytest.param(case, backend, id=f"{case.group}-{case.name}-{backend}", marks=marks)


def _runner(backend: str) -> BatchRunner:
    sandbox = BubblewrapSandbox(LIMITS) if backend == "bubblewrap" else RlimitSandbox(LIMITS)
    return BatchRunner(sandbox, LIMITS, call_timeout_s=1.0)


def _text(result: ProgramResult) -> str:
    call = result.calls[0] if result.calls else None
    return " ".join(str(v) for v in (result.reason, call and call.error, call and call.output) if v)


def _sandbox_leftovers() -> tuple[list[int], list[str]]:
    procs = [p for p in os.listdir("/proc") if p.isdigit()]
    alive = []
    for pid in procs:
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if ours(int(fields["Uid"].split()[0])) and fields["State"].split()[0] not in "ZX":
            alive.append(int(pid))
    files = []
    for base in ("/tmp", "/var/tmp", "/dev/shm"):
        for entry in os.scandir(base):
            try:
                if ours(entry.stat(follow_symlinks=False).st_uid):
                    files.append(entry.path)
            except OSError:
                continue
    return alive, files


@pytest.fixture(autouse=True)
def _nothing_leaks() -> Iterator[None]:
    yield
    assert leftover_cgroups() == [], "run cgroups were not removed"
    if not IS_ROOT:
        return
    eventually(lambda: not _sandbox_leftovers()[0], timeout_s=3, interval_s=0.05)
    alive, files = _sandbox_leftovers()
    assert alive == [], f"sandbox processes outlived the run: {alive}"
    assert files == [], f"sandbox files left behind: {files}"
    assert not (PROJECT / "hostile-was-here").exists()


@pytest.mark.parametrize(("case", "backend"), list(_cases()))
def test_hostile_candidate_gets_its_verdict_and_neighbours_are_unaffected(case: Hostile, backend: str) -> None:
    results = _runner(backend).run([Program("before", PURE, ("3",)), Program("hostile", case.code, case.inputs),
                                    Program("after", PURE, ("4",))])
    before, hostile, after = results
    verdict = case.rlimit if backend == "rlimit" and isinstance(case.rlimit, Verdict) else case.verdict
    assert before.outputs == ["9"] and after.outputs == ["16"], (before, after)
    assert hostile.status == verdict.status, hostile
    if verdict.call is not None:
        assert hostile.calls and hostile.calls[0].status == verdict.call, hostile
    assert verdict.text in _text(hostile), hostile


DETERMINISM = [
    ("hash_seed", "def f(x):\n    return hash(str(x))"),
    ("set_order", "def f(x):\n    return list({str(i) for i in range(20)})"),
    ("urandom", "import os\ndef f(x):\n    return os.urandom(8).hex()"),
    ("clock", "import time\ndef f(x):\n    return time.time_ns()"),
    ("call_count_on_a_module", "import math\ndef f(x):\n    math.n = getattr(math, 'n', 0) + 1\n    return x * math.n"),
    ("address", "def f(x):\n    return id(object()) % 1000003"),
]


@pytest.mark.parametrize("backend", [pytest.param("bubblewrap", marks=pytest.mark.skipif(
    not BWRAP_OK, reason=f"bubblewrap unusable: {BWRAP_REASON}")), "rlimit"])
@pytest.mark.parametrize(("name", "code"), DETERMINISM, ids=[d[0] for d in DETERMINISM])
def test_determinism_attack_is_nondeterministic(backend: str, name: str, code: str) -> None:
    program = Program("d", code, tuple(str(i) for i in range(6)))
    first, second = _runner(backend).run_twice([program])
    difference = compare_runs(first[0], second[0])
    assert difference is not None and difference.startswith("nondeterministic"), (name, first, second)


def test_catalogue_covers_every_group() -> None:
    groups = {c.group for c in CATALOGUE} | {"determinism"}
    assert groups == {"filesystem", "network", "processes", "memory", "time", "result_channel",
                      "interpreter_state", "determinism"}
