"""Pure command-line / container-spec builders, classification and backend selection."""

from __future__ import annotations

import signal
import struct
from typing import Any

import pytest

from curriculum.sandbox import (
    Limits,
    bwrap_argv,
    containment,
    format_containment,
    get_sandbox,
    missing_protections,
    rlimit_argv,
)
from curriculum.sandbox.backends import python_env, python_runtime
from curriculum.sandbox.base import SCRUBBED_ENV, truncate
from curriculum.sandbox.cgroup import CgroupSupport
from curriculum.sandbox.docker_backend import DockerSandbox, container_spec
from curriculum.sandbox.process import Capture, classify, prlimit_argv
from curriculum.sandbox.seccomp import AUDIT_ARCH, filter_program, install_preamble

LIMITS = Limits(cpu_s=3, wall_s=5.0, memory_mb=256, max_procs=8, file_size_mb=2, tmpfs_mb=16)


def test_bwrap_argv_as_root_drops_to_nobody_without_user_namespace() -> None:
    argv = bwrap_argv(["python", "-c", "1"], ("/opt/py",), LIMITS, as_root=True, symlinks={"/bin": "usr/bin"})
    assert argv[0] == "bwrap"
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--unshare-user" not in argv
    sep = argv.index("--")
    inner = argv[sep + 1:]
    assert inner[0].endswith("setpriv") and "--reuid=65534" in inner and inner[-3:] == ["python", "-c", "1"]
    assert argv[argv.index("--tmpfs") - 1] == str(16 * 1024 * 1024)
    assert argv[argv.index("/opt/py") - 1: argv.index("/opt/py") + 2] == ["--ro-bind", "/opt/py", "/opt/py"]
    assert argv[argv.index("usr/bin") - 1: argv.index("usr/bin") + 2] == ["--symlink", "usr/bin", "/bin"]
    assert "--bind" not in argv  # nothing is writable except the tmpfs


def test_bwrap_argv_unprivileged_uses_user_namespace() -> None:
    argv = bwrap_argv(["python"], (), LIMITS, as_root=False, symlinks={})
    assert "--unshare-all" in argv and "--unshare-user" in argv
    assert argv[argv.index("--uid") + 1] == "65534"
    assert argv[argv.index("--cap-drop"): argv.index("--cap-drop") + 2] == ["--cap-drop", "ALL"]


def test_prlimit_and_rlimit_argv() -> None:
    pre = prlimit_argv(LIMITS)
    assert "--cpu=3:4" in pre and f"--as={256 * 1024 * 1024}" in pre and "--nproc=8" in pre
    assert f"--fsize={2 * 1024 * 1024}" in pre
    root = rlimit_argv(["python"], LIMITS, as_root=True)
    assert any(a.endswith("setpriv") for a in root) and root[-1] == "python"
    assert not any(a.endswith("setpriv") for a in rlimit_argv(["python"], LIMITS, as_root=False))


def test_docker_container_spec_is_locked_down() -> None:
    spec = container_spec("print(1)", b"in", LIMITS, image="img")
    assert spec["network_disabled"] is True and spec["network_mode"] == "none"
    assert spec["read_only"] is True and spec["cap_drop"] == ["ALL"]
    assert spec["mem_limit"] == LIMITS.memory_bytes and spec["pids_limit"] == 8
    assert spec["user"] == "65534:65534" and "no-new-privileges" in spec["security_opt"]
    assert "/tmp" in spec["tmpfs"] and "size=16m" in spec["tmpfs"]["/tmp"]
    env = spec["environment"]
    assert set(env) == set(SCRUBBED_ENV) | {"PROPEL_CODE_B64", "PROPEL_STDIN_B64"}
    assert {u["Name"] for u in spec["ulimits"]} >= {"cpu", "fsize", "nproc"}


class _FakeContainer:
    def __init__(self, exit_code: int, out: bytes, oom: bool = False) -> None:
        self.exit_code, self.out, self.oom = exit_code, out, oom
        self.removed = False
        self.attrs: dict[str, Any] = {}

    def start(self) -> None: ...

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": self.exit_code}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return self.out if stdout else b""

    def reload(self) -> None:
        self.attrs = {"State": {"OOMKilled": self.oom}}

    def kill(self) -> None: ...

    def remove(self, force: bool) -> None:
        self.removed = True


class _FakeClient:
    def __init__(self, container: _FakeContainer) -> None:
        self.container = container
        self.specs: list[dict[str, Any]] = []
        self.containers = self

    def create(self, **spec: Any) -> _FakeContainer:
        self.specs.append(spec)
        return self.container


@pytest.mark.parametrize(("exit_code", "oom", "status"), [(0, False, "ok"), (137, True, "memory"), (1, False, "error")])
def test_docker_sandbox_with_fake_engine(exit_code: int, oom: bool, status: str) -> None:
    container = _FakeContainer(exit_code, b"hello\n", oom)
    client = _FakeClient(container)
    result = DockerSandbox(LIMITS, client=client).run_python("print('hello')")
    assert result.status == status and result.backend == "docker"
    assert container.removed
    assert client.specs[0]["network_disabled"] is True


def test_docker_sandbox_without_engine_is_an_infra_value() -> None:
    class Broken:
        @property
        def containers(self) -> Any:
            raise ConnectionError("no engine")

    result = DockerSandbox(LIMITS, client=Broken()).run_python("print(1)")
    assert result.status == "error" and result.meta.get("infra") is True
    assert "docker unavailable" in (result.reason or "")


@pytest.mark.parametrize(
    ("returncode", "stderr", "wall_s", "expected"),
    [
        (0, "", 0.1, "ok"),
        (1, "Traceback...\nMemoryError", 0.1, "memory"),
        (-int(signal.SIGXCPU), "", 3.1, "timeout"),
        (128 + int(signal.SIGKILL), "", 3.5, "timeout"),
        (128 + int(signal.SIGSEGV), "", 0.1, "killed"),
        (2, "boom", 0.1, "error"),
    ],
)
def test_classify_table(returncode: int, stderr: str, wall_s: float, expected: str) -> None:
    status, reason = classify(returncode, Capture(bytearray(), bytearray()), stderr, 0.0, LIMITS, 128, wall_s)
    assert status == expected
    assert (reason is None) == (expected == "ok")


def test_truncate_and_unknown_backend() -> None:
    assert truncate("x" * 5000, 100).endswith("[4900 more chars]")
    with pytest.raises(ValueError, match="bubblewrap"):
        get_sandbox("chroot")


def test_limits_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="cpu_s"):
        Limits(cpu_s=0)


def test_auto_selection_reports_backend() -> None:
    sandbox = get_sandbox("auto", LIMITS)
    result = sandbox.run_python("print(6 * 7)")
    assert result.stdout.strip() == "42"
    assert result.backend == sandbox.name in ("bubblewrap", "rlimit")


def test_bwrap_argv_loads_seccomp_and_hides_dev_shm() -> None:
    argv = bwrap_argv(["python"], (), LIMITS, as_root=True, symlinks={}, uid=1 << 30, seccomp_fd=7)
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert argv[argv.index("--remount-ro") + 1] == "/dev/shm"
    assert f"--reuid={1 << 30}" in argv
    assert argv.index("--seccomp") < argv.index("--")
    assert f"--nofile={LIMITS.open_files}" in prlimit_argv(LIMITS)
    assert "--nproc=99" in prlimit_argv(LIMITS, nproc=99)


def test_seccomp_program_is_well_formed_and_arch_checked() -> None:
    for arch in ("x86_64", "aarch64"):
        program = filter_program(arch)
        assert len(program) % 8 == 0 and len(program) // 8 < 4096
        code, _, _, k = struct.unpack("=HBBI", program[8:16])
        assert (code, k) == (0x15, AUDIT_ARCH[arch])  # wrong architecture → denied
    with pytest.raises(ValueError, match="riscv"):
        filter_program("riscv64")
    assert "prctl" in install_preamble("x86_64") and install_preamble("x86_64").endswith("\n")


def test_containment_names_what_each_backend_lacks() -> None:
    assert set(missing_protections("rlimit", as_root=True)) >= {"network", "host_files_read", "host_processes_hidden"}
    assert "descendants_killed" not in missing_protections("rlimit", as_root=True)
    no_cgroup = CgroupSupport(0, None, None, "none here")
    assert {"descendants_killed", "host_files_write", "processes_per_run", "memory_all_processes_together"} <= set(
        missing_protections("rlimit", as_root=False, cgroup=no_cgroup))
    delegated = CgroupSupport(2, "/sys/fs/cgroup/propel", "/sys/fs/cgroup/propel", "cgroup v2 (delegated)")
    assert {"descendants_killed", "processes_per_run", "memory_all_processes_together"}.isdisjoint(
        missing_protections("rlimit", as_root=False, cgroup=delegated))
    assert "network" not in missing_protections("bubblewrap") and "network" not in missing_protections("docker")
    text = format_containment("rlimit", as_root=True)
    assert text.startswith("sandbox rlimit: lacks ") and "network" in text.splitlines()[0]
    names = [p.name for p in containment("bubblewrap")]
    assert names == sorted(set(names), key=names.index)  # no duplicates
    assert {p.name for p in containment("docker")} == {p.name for p in containment("bubblewrap")}
    with pytest.raises(ValueError):
        containment("chroot")


def test_hash_seed_start_flags_and_environment() -> None:
    assert python_runtime(False).flags == ("-I", "-S") and python_runtime(True).flags == ("-I",)
    assert python_runtime(False, hash_seed=0).flags == ("-s", "-P", "-S")
    assert python_runtime(True, hash_seed=7).flags == ("-s", "-P")
    assert python_env(None) == SCRUBBED_ENV and python_env(5) == {**SCRUBBED_ENV, "PYTHONHASHSEED": "5"}
    for bad in (-1, 2**32, True):
        with pytest.raises(ValueError, match="hash_seed"):
            python_env(bad)


def test_docker_wrapper_runs_the_fork_server_with_a_fixed_hash_seed(tmp_path: Any) -> None:
    """The container's command, run here with this interpreter (no engine needed, trusted code only):
    the fork server must be able to re-execute the wrapper to fix the hash seed."""
    import json
    import subprocess
    import sys

    from curriculum.sandbox.batch import HARNESS_SOURCE

    payload = {"programs": [{"id": "a", "code": "def f(x):\n    return [hash('k'), x]", "inputs": ["1"]}],
               "hash_seed": 0}
    spec = container_spec(HARNESS_SOURCE, json.dumps(payload).encode(), LIMITS)
    env = {**spec["environment"], "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, *spec["command"][1:]], env=env, cwd=tmp_path, capture_output=True, timeout=60)
    expected = subprocess.run([sys.executable, "-c", "print(hash('k'))"], env={"PYTHONHASHSEED": "0"},
                              capture_output=True, text=True).stdout.strip()
    records = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert records[0]["output"] == f"[{expected}, 1]", out.stderr.decode()[-500:]
    assert records[-1]["kind"] == "done"
