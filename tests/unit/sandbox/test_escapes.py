"""Adversarial programs against the real sandbox backends: contained, classified, bounded, host unaffected."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from curriculum.sandbox import BubblewrapSandbox, Limits, RlimitSandbox, bwrap_probe
from curriculum.sandbox.backends import uid_slot
from curriculum.sandbox.base import SCRUBBED_ENV, Sandbox
from curriculum.sandbox.cgroup import OOM_FD_ENV
from testkit.waiting import eventually

BWRAP_OK, BWRAP_REASON = bwrap_probe()
IS_ROOT = os.geteuid() == 0
needs_bwrap = pytest.mark.skipif(not BWRAP_OK, reason=f"bubblewrap unusable: {BWRAP_REASON}")

BACKENDS = [
    pytest.param("bubblewrap", marks=needs_bwrap),
    pytest.param("rlimit"),
]
FAST = Limits(cpu_s=1, wall_s=1.5, memory_mb=512, max_procs=16)


def make(name: str) -> Sandbox:
    return BubblewrapSandbox(FAST) if name == "bubblewrap" else RlimitSandbox(FAST)


def sandbox_processes() -> int:
    """Live processes of this process's per-run sandbox uids (as root every run has its own uid in this
    process's slot, :func:`curriculum.sandbox.backends.uid_slot`; other xdist workers draw from other slots,
    and other jobs on a shared machine may run sandboxes as ``nobody``)."""
    return len([pid for pid in os.listdir("/proc") if pid.isdigit() and _per_run_uid_alive(pid)])


def _per_run_uid_alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return False
    return ours(int(fields["Uid"].split()[0])) and fields["State"].split()[0] not in "ZX"


def ours(uid: int) -> bool:
    """A run uid of this process's slot: another xdist worker's runs (another slot) are not this test's."""
    lo, hi = uid_slot()
    return lo <= uid < hi


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_loop_times_out(backend: str) -> None:
    result = make(backend).run_python("while True:\n    pass\n")
    assert result.status == "timeout", result.log_view()
    assert "limit" in (result.reason or "")  # the CPU limit ended it (its speed: benchmarks/sandbox_throughput)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sleeping_code_hits_wall_clock(backend: str) -> None:
    result = make(backend).run_python("import time\ntime.sleep(60)\n")
    assert result.status == "timeout"
    assert "wall-clock" in (result.reason or "")
    assert result.wall_s < 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb_is_contained(backend: str) -> None:
    if backend == "rlimit" and not IS_ROOT:
        pytest.skip("RLIMIT_NPROC counts all of the test user's processes when not root")
    code = (
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "except OSError as err:\n"
        "    print('blocked', made, err.errno)\n"
    )
    result = make(backend).run_python(code)
    assert "blocked" in result.stdout, result.log_view()
    assert int(result.stdout.split()[1]) < FAST.max_procs
    if IS_ROOT:  # every forked child was killed with the sandbox
        assert eventually(lambda: sandbox_processes() == 0, timeout_s=3, interval_s=0.05)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unbounded_fork_bomb_ends(backend: str) -> None:
    if backend == "rlimit" and not IS_ROOT:
        pytest.skip("RLIMIT_NPROC counts all of the test user's processes when not root")
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = make(backend).run_python(code)
    assert result.status in ("timeout", "killed"), result.log_view()
    assert result.wall_s < 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_hog_is_classified(backend: str) -> None:
    result = make(backend).run_python("blob = bytearray(4 * 1024**3)\n")
    assert result.status == "memory", result.log_view()
    assert "MiB" in (result.reason or "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_output_is_cut(backend: str) -> None:
    limits = Limits(cpu_s=2, wall_s=5.0, stdout_bytes=1 << 20)
    sandbox = BubblewrapSandbox(limits) if backend == "bubblewrap" else RlimitSandbox(limits)
    result = sandbox.run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    assert result.status == "output_limit"
    assert len(result.stdout) <= 1 << 20
    assert len(str(result.log_view()["stdout"])) < 3000


@pytest.mark.parametrize("backend", BACKENDS)
def test_environment_secrets_are_not_visible(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPEL_FAKE_SECRET", "hunter2-fake-secret")
    code = (
        "import os\n"
        "print(dict(os.environ))\n"
        f"for path in ('/proc/1/environ', '/proc/{os.getpid()}/environ', '/proc/{os.getppid()}/environ'):\n"
        "    try:\n"
        "        print(open(path, 'rb').read())\n"
        "    except OSError as err:\n"
        "        print('denied', path, err.errno)\n"
    )
    if backend == "rlimit" and not IS_ROOT:
        code = "import os\nprint(dict(os.environ))\n"
    result = make(backend).run_python(code)
    assert result.status == "ok", result.log_view()
    assert "PROPEL_FAKE_SECRET" not in result.stdout
    assert "hunter2" not in result.stdout


def hash_with_seed_0(text: str) -> int:
    out = subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], env={"PYTHONHASHSEED": "0"},
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.parametrize("site_packages", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hash_seed_start_sees_only_the_scrubbed_environment(backend: str, site_packages: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``hash_seed`` starts Python with ``PYTHONHASHSEED`` and ``-s -P`` instead of ``-I`` (which
    would ignore the seed): the seed holds, no other host variable arrives, and neither the user
    site nor the working directory is on ``sys.path``."""
    monkeypatch.setenv("PROPEL_FAKE_SECRET", "hunter2-fake-secret")
    monkeypatch.setenv("PYTHONPATH", "/propel-fake-pythonpath")
    code = ("import json, os, sys\n"
            "flags = [sys.flags.no_user_site, sys.flags.safe_path, sys.flags.hash_randomization]\n"
            "print(json.dumps({'env': dict(os.environ), 'path': sys.path, 'cwd': os.getcwd(), 'hash': hash('k'),\n"
            "                  'flags': flags}))\n")
    result = make(backend).run_python(code, site_packages=site_packages, hash_seed=0)
    assert result.status == "ok", result.log_view()
    seen = json.loads(result.stdout)
    bwrap_pwd = {"PWD": "/tmp"} if backend == "bubblewrap" else {}  # set by bwrap's --chdir
    assert set(seen["env"]) - {OOM_FD_ENV} == {*SCRUBBED_ENV, "PYTHONHASHSEED", *bwrap_pwd}
    assert {k: v for k, v in seen["env"].items() if k not in ("HOME", "TMPDIR", OOM_FD_ENV)} == {
        **{k: v for k, v in SCRUBBED_ENV.items() if k not in ("HOME", "TMPDIR")}, "PYTHONHASHSEED": "0", **bwrap_pwd}
    assert seen["env"]["PYTHONHASHSEED"] == "0" and seen["hash"] == hash_with_seed_0("k")
    assert seen["flags"] == [1, True, 0]  # -s, -P, the seed is fixed
    assert "" not in seen["path"] and seen["cwd"] not in seen["path"] and os.getcwd() not in seen["path"]
    assert not any("propel-fake" in p or "/.local/" in p for p in seen["path"])
    assert "hunter2" not in result.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_recursion_bomb_is_classified(backend: str) -> None:
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef r(n):\n    return r(n + 1) + 1\nr(0)\n"
    result = make(backend).run_python(code)
    assert result.status in ("killed", "memory", "error", "timeout"), result.log_view()
    assert result.reason
    assert result.wall_s < 5


@needs_bwrap
def test_bwrap_blocks_localhost_server() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except TimeoutError:
            return

    thread = threading.Thread(target=accept)
    thread.start()
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    print('CONNECTED')\n"
        "except OSError as err:\n"
        "    print('refused', err.errno)\n"
    )
    result = BubblewrapSandbox(FAST).run_python(code)
    thread.join()
    server.close()
    assert result.status == "ok", result.log_view()
    assert "CONNECTED" not in result.stdout
    assert accepted == []


@needs_bwrap
def test_bwrap_cannot_write_outside_its_tmp(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    repo_target = Path(__file__).resolve().parent / "escaped.txt"
    code = (
        f"for path in ({str(target)!r}, {str(repo_target)!r}, '/etc/escaped', '/usr/escaped'):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as err:\n"
        "        print('blocked', path, err.errno)\n"
        "open('/tmp/inside.txt', 'w').write('ok')\n"
        "print('tmp ok')\n"
    )
    result = BubblewrapSandbox(FAST).run_python(code)
    assert result.status == "ok", result.log_view()
    assert "tmp ok" in result.stdout
    assert not target.exists() and not repo_target.exists()
    assert not Path("/etc/escaped").exists() and not Path("/usr/escaped").exists()


@needs_bwrap
def test_bwrap_hides_host_files() -> None:
    code = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        f"print(os.path.exists({str(Path(__file__).resolve())!r}))\n"
    )
    result = BubblewrapSandbox(FAST).run_python(code)
    assert result.status == "ok"
    assert "'work'" not in result.stdout and "'home'" not in result.stdout
    assert result.stdout.strip().endswith("False")


@pytest.mark.skipif(not IS_ROOT, reason="the rlimit backend only drops privileges when started as root")
def test_rlimit_as_root_cannot_write_host_files(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    code = f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError as err:\n    print('blocked', err.errno)\n"
    result = RlimitSandbox(FAST).run_python(code)
    assert "blocked" in result.stdout
    assert not target.exists()


def test_rlimit_backend_declares_itself_weaker() -> None:
    assert RlimitSandbox.isolates_fs_and_network is False
    assert BubblewrapSandbox.isolates_fs_and_network is True


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_import_tricks_stay_contained(backend: str, tmp_path: Path) -> None:
    if backend == "rlimit" and not IS_ROOT:
        pytest.skip("the rlimit backend cannot protect the user's own files when not root")
    marker = tmp_path / "pwned"
    code = (
        "mod = getattr(__builtins__, '__imp' + 'ort__')('o' + 's')\n"
        f"rc = mod.system('touch {marker}')\n"
        "sub = ().__class__.__base__.__subclasses__()\n"
        "print('rc', rc, len(sub))\n"
    )
    result = make(backend).run_python(code)
    assert result.status in ("ok", "error"), result.log_view()
    assert not marker.exists()
