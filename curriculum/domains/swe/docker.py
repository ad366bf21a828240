"""Docker backend for SWE suites: one image per repository, one container per episode.

NOT EXERCISED AGAINST AN ENGINE: no Docker engine was available when this was written. The image
recipe (:func:`dockerfile_for`) and the container spec (:func:`suite_container_spec`) are pure and
unit-tested; :class:`DockerSuiteRunner` reports an ``infra`` run when no engine answers.

Image: ``python:<major.minor>-slim`` + pinned pytest and pytest-timeout + the cached tree at
``/src`` (for reference; each episode mounts its own copy at ``/repo``). Container: network
disabled, read-only root, tmpfs /tmp, memory/pids/ulimits, no capabilities, no-new-privileges,
user nobody, the episode copy bind-mounted read-write at ``/repo``.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

from curriculum.domains.swe.sandbox import (
    PY_FLAGS,
    REPORT_DIR,
    SuiteConfig,
    SuiteRun,
    bootstrap_code,
    chown_tree,
    finish_run,
    prepare_run,
    pytest_argv,
    pythonpath_for,
    suite_env,
)
from curriculum.sandbox.backends import NOBODY
from curriculum.sandbox.base import ExecutionResult, Limits

MOUNT = "/repo"


def image_tag(name: str, content_hash: str) -> str:
    return f"propel-swe/{name.lower()}:{content_hash[:12]}"


def dockerfile_for(pytest_version: str, timeout_version: str, python: str | None = None) -> str:
    """The Dockerfile for one repository's image (build context: the cached tree)."""
    py = python or ".".join(platform.python_version_tuple()[:2])
    return (f"FROM python:{py}-slim\n"
            f"RUN pip install --no-cache-dir pytest=={pytest_version} pytest-timeout=={timeout_version}\n"
            "COPY . /src\nWORKDIR /repo\n")


def suite_container_spec(image: str, workspace: Path, config: SuiteConfig, select: tuple[str, ...] = ()
                         ) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (pure)."""
    from docker.types import Mount, Ulimit

    limits = config.limits
    report = f"{MOUNT}/{REPORT_DIR}/junit.xml"
    code = bootstrap_code(MOUNT, pythonpath_for(workspace, config), pytest_argv(config, report, select))
    return {
        "image": image,
        "command": ["python", *PY_FLAGS, "-c", code],
        "environment": suite_env(f"{MOUNT}/{REPORT_DIR}/tmp"),
        "network_disabled": True,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,size={limits.tmpfs_mb}m"},
        "mounts": [Mount(target=MOUNT, source=str(workspace), type="bind", read_only=False)],
        "working_dir": MOUNT,
        "user": f"{NOBODY}:{NOBODY}",
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,
        "pids_limit": limits.max_procs,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "ulimits": [Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
                    Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes)],
        "detach": True,
    }


class DockerSuiteRunner:
    """Runs a suite in a container of the repository's image (``image`` or ``default_image``)."""

    name = "docker"
    isolation = "container: no network, read-only root, uid nobody"

    def __init__(self, image: str = "python:3.11-slim", client: Any = None) -> None:
        self.image = image
        self._client = client

    def shell(self, root: Path, command: str, limits: Limits) -> ExecutionResult:
        """Not implemented for docker: an infrastructure error value (agents need rlimit/bubblewrap)."""
        return ExecutionResult("error", "", "", None, 0.0, 0.0, "the docker runner has no agent shell yet",
                               self.name, {"infra": True})

    def run(self, root: Path, config: SuiteConfig, select: tuple[str, ...] = ()) -> SuiteRun:
        out = prepare_run(root)
        if os.geteuid() == 0:
            chown_tree(root, NOBODY)
        started = time.monotonic()
        try:
            if self._client is None:
                import docker

                self._client = docker.from_env()
            container = self._client.containers.create(**suite_container_spec(self.image, root, config, select))
        except Exception as err:  # no engine / no image: an infrastructure failure, as a value
            result = ExecutionResult("error", "", "", None, 0.0, 0.0, f"docker unavailable: {err}", self.name,
                                     {"infra": True})
            return finish_run(result, out / "junit.xml", self.name, self.isolation)
        try:
            container.start()
            try:
                code = int(container.wait(timeout=config.limits.wall_s)["StatusCode"])
                status, reason = "ok", None
            except Exception as err:  # the SDK's read timeout on wait
                container.kill()
                code, status, reason = -9, "timeout", f"wall-clock limit of {config.limits.wall_s}s ({err})"
            logs = bytes(container.logs()).decode(errors="replace")
        finally:
            container.remove(force=True)
        result = ExecutionResult(status, logs, "", code, time.monotonic() - started, 0.0, reason,  # type: ignore[arg-type]
                                 self.name)
        return finish_run(result, out / "junit.xml", self.name, self.isolation)
