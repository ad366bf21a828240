"""Docker backend (``docker`` SDK): for hosts with an engine and for SWE-style repositories.

The container spec is a pure function (:func:`container_spec`) so its isolation is unit-tested
without an engine: network disabled, read-only root filesystem, a size-limited tmpfs on /tmp,
memory (no swap) and pids limits, CPU/file-size/process/open-file ulimits, all capabilities dropped,
``no-new-privileges``, user ``nobody``, and only the scrubbed environment. The code and stdin
travel base64-encoded in two environment variables read by a tiny stdlib wrapper, because the
SDK's ``run`` has no stdin; each is capped at :data:`MAX_ENV_PAYLOAD` bytes.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from curriculum.sandbox.base import SCRUBBED_ENV, ExecutionResult, Limits, Status
from curriculum.sandbox.process import Capture, classify

DEFAULT_IMAGE = "python:3.11-slim"
MAX_ENV_PAYLOAD = 120_000
#: Reads the code and stdin from the environment. The code variable is kept (not popped) so the
#: batch fork server can re-execute this wrapper with a fixed hash seed; stdin is popped.
WRAPPER = (
    "import base64,io,os,sys;"
    "sys.stdin=io.TextIOWrapper(io.BytesIO(base64.b64decode(os.environ.pop('PROPEL_STDIN_B64',''))));"
    "code=base64.b64decode(os.environ['PROPEL_CODE_B64']).decode();"
    "exec(compile(code,'<sandbox>','exec'),{'__name__':'__main__'})"
)


def container_spec(code: str, stdin: bytes, limits: Limits, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (pure)."""
    from docker.types import Ulimit

    environment = {
        **SCRUBBED_ENV,
        "PROPEL_CODE_B64": base64.b64encode(code.encode()).decode(),
        "PROPEL_STDIN_B64": base64.b64encode(stdin).decode(),
    }
    return {
        "image": image,
        "command": ["python", "-I", "-S", "-c", WRAPPER],
        "environment": environment,
        "network_disabled": True,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,noexec,nosuid,size={limits.tmpfs_mb}m"},
        "working_dir": "/tmp",
        "user": "65534:65534",
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,
        "pids_limit": limits.max_procs,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "ulimits": [
            Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
            Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
            Ulimit(name="nproc", soft=limits.max_procs, hard=limits.max_procs),
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "detach": True,
        "stdin_open": False,
        "tty": False,
    }


class DockerSandbox:
    """Runs Python in a throw-away container; needs a reachable Docker engine."""

    name = "docker"
    isolates_fs_and_network = True
    #: the image's interpreter, not the host's (code compiled here may not load there)
    host_python = False

    def __init__(self, limits: Limits | None = None, image: str = DEFAULT_IMAGE, client: Any = None) -> None:
        self.limits = limits or Limits()
        self.image = image
        self._client = client

    def _get_client(self) -> Any:
        if self._client is None:
            import docker

            self._client = docker.from_env()
        return self._client

    def _infra_error(self, reason: str) -> ExecutionResult:
        return ExecutionResult("error", "", "", None, 0.0, 0.0, reason, self.name, {"infra": True})

    def run_python(self, code: str, stdin: bytes = b"", limits: Limits | None = None,
                   site_packages: bool = False, hash_seed: int | None = None) -> ExecutionResult:
        """``site_packages`` is ignored: the image decides what is installed. So is ``hash_seed``
        (the container runs ``-I``): the batch fork server re-executes itself with it."""
        limits = limits or self.limits
        if max(len(code), len(stdin)) * 4 // 3 > MAX_ENV_PAYLOAD:
            return ExecutionResult("error", "", "", None, 0.0, 0.0,
                                   f"payload larger than {MAX_ENV_PAYLOAD} bytes for the docker backend", self.name)
        try:
            client = self._get_client()
            container = client.containers.create(**container_spec(code, stdin, limits, self.image))
        except Exception as err:  # engine unreachable / image missing: an infra error, as a value
            return self._infra_error(f"docker unavailable: {type(err).__name__}: {err}")
        try:
            return self._execute(container, limits)
        finally:
            container.remove(force=True)

    def _execute(self, container: Any, limits: Limits) -> ExecutionResult:
        started = time.monotonic()
        container.start()
        cap = Capture(bytearray(), bytearray())
        try:
            returncode = int(container.wait(timeout=limits.wall_s)["StatusCode"])
        except Exception as err:  # requests' ReadTimeout / ConnectionError on the wait call
            container.kill()
            cap.timed_out = True
            returncode = -9
            if "timed out" not in str(err).lower() and "timeout" not in type(err).__name__.lower():
                return self._infra_error(f"docker wait failed: {type(err).__name__}: {err}")
        wall_s = time.monotonic() - started
        stdout = bytes(container.logs(stdout=True, stderr=False))
        cap.stdout.extend(stdout[: limits.stdout_bytes])
        cap.over_limit = len(stdout) > limits.stdout_bytes
        cap.stderr.extend(bytes(container.logs(stdout=False, stderr=True))[: limits.stderr_bytes])
        container.reload()
        stderr = cap.stderr.decode("utf-8", errors="replace")
        status: Status
        reason: str | None
        if container.attrs.get("State", {}).get("OOMKilled"):
            status, reason = "memory", f"container OOM-killed at {limits.memory_mb} MiB"
        else:
            status, reason = classify(returncode, cap, stderr, 0.0, limits, 128, wall_s)
        return ExecutionResult(status, cap.stdout.decode("utf-8", errors="replace"), stderr, returncode,
                               wall_s, 0.0, reason, self.name)
