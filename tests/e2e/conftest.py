"""End-to-end fixtures: one small bootstrapped generator per test session, daemon processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import DaemonState, Run
from testkit.configs import write_config  # noqa: F401 (the e2e tests' config writer)


@pytest.fixture(scope="session")
def tiny_generator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bootstrapped arith generator, trained once per run (:mod:`testkit.e2e_generator`): in
    ``PROPEL_E2E_CACHE`` when set (a cache kept across sessions), else in ``PROPEL_E2E_RUN_CACHE`` (the xdist
    controller's, shared by its workers), else in this session's temp directory."""
    from testkit.e2e_generator import cached_generator

    cache = os.environ.get("PROPEL_E2E_CACHE") or os.environ.get("PROPEL_E2E_RUN_CACHE")
    return cached_generator(Path(cache) if cache else tmp_path_factory.getbasetemp() / "e2e-models")


def start_daemon(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(config), "run", *args],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1"})


def kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    proc.wait(timeout=120)


def run_state(store: Store, run: str) -> tuple[str | None, int, str | None]:
    with store.session() as s:
        row = s.execute(select(DaemonState.phase, DaemonState.cycle, DaemonState.leader_id)
                        .join(Run, Run.id == DaemonState.run_id).where(Run.name == run)).first()
    return (row.phase, row.cycle, row.leader_id) if row else (None, 0, None)


def wait_until(pred, timeout_s: float, what: str, proc: subprocess.Popen[bytes] | None = None,
               log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-4000:] if log else ""
            pytest.fail(f"daemon exited ({proc.returncode}) while waiting for {what}:\n{tail}")
        time.sleep(0.2)
    tail = log.read_text()[-4000:] if log else ""
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tail}")
