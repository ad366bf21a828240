"""Episode sandboxes for SWE: a fresh copy of a repository per episode, its test suite run through
pytest inside the project's sandbox, results read from a JUnit XML report.

Backends (:func:`curriculum.domains.swe.runners.get_suite_runner`):

``rlimit`` (what ``auto`` picks without a working bubblewrap)
    The project's rlimit sandbox (:func:`curriculum.sandbox.process.run_command`: CPU, address
    space, processes, file size, wall clock, output cap, scrubbed environment, whole process group
    killed) plus, when started as root, ``unshare --net`` (an empty network namespace: the suite
    cannot reach the network or host services) and a drop to ``nobody`` with ``setpriv``. The
    episode copy is owned by ``nobody`` so the suite can write only there and in world-writable
    places. Without root the network is NOT isolated (reported in ``SuiteRun.isolation``).
``bubblewrap``
    :func:`curriculum.sandbox.bwrap_argv` (namespaces, read-only /usr and Python, private /tmp,
    rlimits, uid nobody) with the episode copy bound read-write at ``/repo``. The argv is
    unit-tested everywhere; a real suite run and verdict are tested where ``bwrap`` works.
``docker``
    One image per repository (:func:`dockerfile_for`: python slim + pinned pytest + the cached
    tree) and a locked-down container per episode with the copy mounted at ``/repo``
    (:func:`suite_container_spec`). Construction-tested only: no Docker engine was available when
    this was written, so this path has never run a suite.

Every run passes ``-p no:cacheprovider``, disables plugin autoloading except ``pytest-timeout``
(per-test timeout), clears the project's ``addopts`` and uses ``--continue-on-collection-errors``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from curriculum.domains.swe.junit import TestResult, parse_junit
from curriculum.sandbox.backends import (
    NOBODY,
    PRLIMIT,
    bwrap_argv,
    host_symlinks,
    python_runtime,
    uid_drop_argv,
    unreadable_runtime_result,
)
from curriculum.sandbox.base import SCRUBBED_ENV, ExecutionResult, Limits
from curriculum.sandbox.process import prlimit_argv, run_command

REPORT_DIR = ".propel-run"
DEFAULT_SUITE_LIMITS = Limits(cpu_s=300, wall_s=300.0, memory_mb=2048, max_procs=64, file_size_mb=64)
DEFAULT_TEST_TIMEOUT_S = 20
SUITE_RUNNERS = ("auto", "rlimit", "bubblewrap", "docker")


@dataclass(frozen=True)
class SuiteConfig:
    """How to run one repository's suite."""

    tests: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()
    test_timeout_s: int = DEFAULT_TEST_TIMEOUT_S
    limits: Limits = DEFAULT_SUITE_LIMITS


@dataclass(frozen=True)
class SuiteRun:
    """One suite run. ``status``: ``ok`` (a report was read), ``timeout`` (whole-suite limit),
    ``no_report`` (pytest ended without a report), ``infra`` (the sandbox could not run)."""

    status: str
    results: dict[str, TestResult] = field(default_factory=dict)
    collect_errors: tuple[str, ...] = ()
    reason: str | None = None
    exit_code: int | None = None
    copy_s: float = 0.0
    run_s: float = 0.0
    backend: str = ""
    isolation: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def outcomes(self) -> dict[str, str]:
        return {tid: r.outcome for tid, r in self.results.items()}


def pythonpath_for(root: Path, config: SuiteConfig) -> tuple[str, ...]:
    """Relative directories put first on ``sys.path``: the configured ones, else ``.`` (+ ``src``)."""
    if config.pythonpath:
        return config.pythonpath
    return (".", "src") if (root / "src").is_dir() else (".",)


def pytest_argv(config: SuiteConfig, report: str, select: tuple[str, ...] = ()) -> list[str]:
    """pytest arguments (pure): quiet, no cache, per-test timeout, JUnit xunit1 report."""
    return ["-q", "-p", "no:cacheprovider", "-p", "pytest_timeout", f"--timeout={config.test_timeout_s}",
            "--continue-on-collection-errors", "-o", "addopts=", "-o", "junit_family=xunit1",
            f"--junitxml={report}", *config.pytest_args, *(select or config.tests)]


def bootstrap_code(repo_dir: str, paths: tuple[str, ...], args: list[str]) -> str:
    """The ``python -c`` program: repository paths first on sys.path, then ``pytest.main``."""
    entries = [os.path.normpath(os.path.join(repo_dir, p)) for p in paths]
    return (f"import os, sys; sys.path[:0] = {entries!r}; os.chdir({repo_dir!r}); import pytest; "
            f"sys.exit(pytest.main({args!r}))")


#: Interpreter flags: no user site, no script dir on sys.path. Not ``-I``: it would ignore
#: PYTHONHASHSEED, and a fixed hash seed keeps parametrised test ids (built from sets) stable
#: between runs. The environment is the scrubbed one either way.
PY_FLAGS = ("-s", "-P")


def suite_env(home: str) -> dict[str, str]:
    return {**SCRUBBED_ENV, "HOME": home, "TMPDIR": home, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTHONHASHSEED": "0"}


def shell_env(home: str) -> dict[str, str]:
    """Agent shell environment: the suite's, with the project interpreter's bin first on PATH."""
    return {**suite_env(home), "PATH": f"{Path(sys.executable).parent}:{SCRUBBED_ENV['PATH']}"}


class Workspace:
    """A fresh, private copy of a repository tree for one episode (removed by :meth:`close`)."""

    def __init__(self, source: Path, base_dir: Path | None = None) -> None:
        started = time.monotonic()
        self.parent = Path(tempfile.mkdtemp(prefix="propel-swe-", dir=base_dir))
        self.parent.chmod(0o755)  # the suite runs as nobody and must reach the copy
        self.root = self.parent / "repo"
        copy_tree(source, self.root)
        self.copy_s = time.monotonic() - started

    def close(self) -> None:
        shutil.rmtree(self.parent, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def copy_tree(source: Path, target: Path) -> None:
    """``cp -a --reflink=auto`` (copy-on-write where the filesystem allows, a plain copy otherwise)."""
    done = subprocess.run(["cp", "-a", "--reflink=auto", f"{source}/.", str(target)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


def chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


class SuiteRunner(Protocol):
    name: str

    def shell(self, root: Path, command: str, limits: Limits) -> ExecutionResult:
        """Run one bash command in the tree at ``root`` (the agents' ``bash`` tool)."""
        ...

    def run(self, root: Path, config: SuiteConfig, select: tuple[str, ...] = ()) -> SuiteRun:
        """Run the suite (or the ``select``ed test paths) of the tree at ``root`` (modified in place)."""
        ...


def prepare_run(root: Path) -> Path:
    out = root / REPORT_DIR
    shutil.rmtree(out, ignore_errors=True)
    (out / "tmp").mkdir(parents=True)
    return out


def finish_run(result: ExecutionResult, report: Path, backend: str, isolation: str) -> SuiteRun:
    common: dict[str, Any] = {"exit_code": result.returncode, "run_s": result.wall_s, "backend": backend,
                              "isolation": isolation}
    if result.meta.get("infra"):
        return SuiteRun("infra", reason=result.reason, **common)
    if result.status in ("timeout", "memory", "output_limit", "killed"):
        status = "timeout" if result.status == "timeout" else "no_report"
        return SuiteRun(status, reason=f"suite {result.status}: {result.reason}", **common)
    if not report.is_file():
        tail = (result.stdout.strip().splitlines() or result.stderr.strip().splitlines() or ["no output"])[-1]
        return SuiteRun("no_report", reason=f"pytest exit {result.returncode} without a report: {tail[:300]}",
                        **common)
    parsed = parse_junit(report.read_text(errors="replace"))
    if isinstance(parsed, str):
        return SuiteRun("no_report", reason=parsed, **common)
    results, collect_errors = parsed
    return SuiteRun("ok", results, tuple(collect_errors), None, **common)


class RlimitSuiteRunner:
    """prlimit + (as root) ``unshare --net`` + setpriv to nobody; see the module docstring."""

    name = "rlimit"

    def __init__(self, unshare: str | None = None) -> None:
        self.as_root = os.geteuid() == 0
        self.unshare = unshare or shutil.which("unshare")

    @property
    def isolation(self) -> str:
        if self.as_root and self.unshare:
            return "rlimits, no network (netns), uid nobody"
        return "rlimits only (network NOT isolated)"

    def argv(self, root: Path, config: SuiteConfig, report: str, select: tuple[str, ...]) -> list[str]:
        runtime = python_runtime(site_packages=True)
        code = bootstrap_code(str(root), pythonpath_for(root, config), pytest_argv(config, report, select))
        net = [self.unshare, "--net", "--"] if self.as_root and self.unshare else []
        drop = uid_drop_argv() if self.as_root else []
        return [*net, *prlimit_argv(config.limits, PRLIMIT), *drop, runtime.executable, *PY_FLAGS, "-c", code]

    def shell(self, root: Path, command: str, limits: Limits) -> ExecutionResult:
        """Run a bash command in the tree at ``root`` under the same isolation (agent tools). As
        root the shell runs as nobody, which cannot start the project interpreter when it lives
        under /root (this machine); use bubblewrap for agents that run Python."""
        out = prepare_run(root)
        if self.as_root:
            chown_tree(root, NOBODY)
        net = [self.unshare, "--net", "--"] if self.as_root and self.unshare else []
        drop = uid_drop_argv() if self.as_root else []
        argv = [*net, *prlimit_argv(limits, PRLIMIT), *drop, "/bin/bash", "-c", command]
        return run_command(argv, b"", shell_env(str(out / "tmp")), limits, self.name, cwd=str(root))

    def run(self, root: Path, config: SuiteConfig, select: tuple[str, ...] = ()) -> SuiteRun:
        unreadable = (unreadable_runtime_result(python_runtime(site_packages=True), self.name, ancestors=True)
                      if self.as_root else None)
        if unreadable is not None:
            return finish_run(unreadable, root / REPORT_DIR / "junit.xml", self.name, self.isolation)
        out = prepare_run(root)
        if self.as_root:
            chown_tree(root, NOBODY)
        report = out / "junit.xml"
        result = run_command(self.argv(root, config, str(report), select), b"", suite_env(str(out / "tmp")),
                             config.limits, self.name, cwd=str(root))
        return finish_run(result, report, self.name, self.isolation)


class BubblewrapSuiteRunner:
    """bubblewrap with the episode copy bound read-write at ``/repo``."""

    name = "bubblewrap"
    isolation = "namespaces (pid, net, ipc, uts), read-only system, uid nobody"
    mount = "/repo"

    def __init__(self, bwrap: str | None = None) -> None:
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"

    def argv(self, root: Path, config: SuiteConfig, select: tuple[str, ...]) -> list[str]:
        runtime = python_runtime(site_packages=True)
        report = f"{self.mount}/{REPORT_DIR}/junit.xml"
        code = bootstrap_code(self.mount, pythonpath_for(root, config), pytest_argv(config, report, select))
        return self.wrap(root, [runtime.executable, *PY_FLAGS, "-c", code], config.limits)

    def wrap(self, root: Path, command: list[str], limits: Limits) -> list[str]:
        """``command`` inside bubblewrap (rlimits, Python runtime bound, the copy at /repo)."""
        runtime = python_runtime(site_packages=True)
        inner = [*prlimit_argv(limits, PRLIMIT), *command]
        argv = bwrap_argv(inner, runtime.binds, limits, as_root=os.geteuid() == 0,
                          symlinks=host_symlinks(), bwrap=self.bwrap)
        at = argv.index("--proc")
        argv[at:at] = ["--bind", str(root), self.mount]
        chdir = argv.index("--chdir")
        argv[chdir + 1] = self.mount
        return argv

    def shell(self, root: Path, command: str, limits: Limits) -> ExecutionResult:
        """Run a bash command with the copy at /repo under the same isolation (agent tools)."""
        prepare_run(root)
        if os.geteuid() == 0:
            chown_tree(root, NOBODY)
        return run_command(self.wrap(root, ["/bin/bash", "-c", command], limits), b"",
                           shell_env(f"{self.mount}/{REPORT_DIR}/tmp"), limits, self.name, signal_offset=128)

    def run(self, root: Path, config: SuiteConfig, select: tuple[str, ...] = ()) -> SuiteRun:
        unreadable = (unreadable_runtime_result(python_runtime(site_packages=True), self.name, ancestors=False)
                      if os.geteuid() == 0 else None)
        if unreadable is not None:
            return finish_run(unreadable, root / REPORT_DIR / "junit.xml", self.name, self.isolation)
        out = prepare_run(root)
        if os.geteuid() == 0:
            chown_tree(root, NOBODY)
        env = suite_env(f"{self.mount}/{REPORT_DIR}/tmp")
        result = run_command(self.argv(root, config, select), b"", env, config.limits, self.name,
                             signal_offset=128)
        return finish_run(result, out / "junit.xml", self.name, self.isolation)


def run_suite_in_copy(runner: SuiteRunner, source: Path, config: SuiteConfig,
                      select: tuple[str, ...] = ()) -> SuiteRun:
    """Copy ``source`` to a fresh workspace, run the suite there, remove the copy."""
    with Workspace(source) as ws:
        run = runner.run(ws.root, config, select)
    return SuiteRun(**{**run.__dict__, "copy_s": ws.copy_s})
