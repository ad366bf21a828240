"""What an operator meets in the first hour, on a real `propel run` (SQLite, tiny config) whose output
goes to a file (not a terminal): progress lines, JSON logs, `propel check` that tells the truth while
it runs and fails within `daemon.heartbeat_stale_s` once it is killed, `/healthz` that agrees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from testkit.servers import free_port
from tests.e2e.conftest import kill, wait_until, write_config

pytestmark = [pytest.mark.slow]
STALE_S = 3.0


def _check(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "check", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_check_follows_the_live_daemon_and_fails_within_the_threshold_once_killed(
        tmp_path: Path, tiny_generator: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "c.toml", tiny_generator, tmp_path / "data", f"sqlite:///{tmp_path / 'p.db'}",
                       "fh", port=port).read_text()
    cfg = cfg.replace("heartbeat_s = 1.0\n", f"heartbeat_s = 0.5\nheartbeat_stale_s = {STALE_S}\n")
    config = tmp_path / "c.toml"
    config.write_text(cfg)
    assert _check(config).returncode == 1  # nothing ran yet: no daemon state
    log = tmp_path / "daemon.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--log-format", "json", "--config",
                                 str(config), "run"], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                                     "PROPEL_PROGRESS_INTERVAL_S": "0"})
    try:
        wait_until(lambda: _check(config).returncode == 0, 600, "propel check to pass", proc, log)
        ok = _check(config)
        assert ok.stdout.startswith("healthy: heartbeat") and f"API http://127.0.0.1:{port} answers" in ok.stdout
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
        assert health["ok"] and health["leader"] and health["heartbeat_age_s"] < STALE_S
        wait_until(lambda: '"summary"' in log.read_text(), 600, "a cycle summary", proc, log)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert 'propel_degraded{reason="solver_budget_exhausted"} 0.0' in metrics
    finally:
        kill(proc, signal.SIGKILL)  # no clean shutdown: the lease and heartbeat stay behind
    killed_at = time.monotonic()
    api_down = _check(config)
    assert api_down.returncode == 1 and f"API http://127.0.0.1:{port}/healthz does not answer" in api_down.stderr
    # the last heartbeat is no newer than the kill: a check started STALE_S later must fail on its age
    time.sleep(max(0.0, killed_at + STALE_S - time.monotonic()))
    failed = _check(config, "--no-api")
    assert failed.returncode == 1, failed.stdout
    assert failed.stderr.startswith("unhealthy: last heartbeat") and f"(limit {STALE_S:g} s)" in failed.stderr

    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # --log-format json: every line is one JSON object
    msgs = [r["msg"] for r in records]
    assert any(m.startswith("labelling first-probe corpus: started") for m in msgs)
    assert any(m.startswith("labelling first-probe corpus: done") for m in msgs)
    assert any("labelling first-probe corpus: " in m and "%)" in m and "ETA" in m for m in msgs)
    summary = next(r for r in records if "summary" in r)
    assert summary["cycle"] == 0 and "emitted" in summary["summary"]


def test_bootstrap_reports_progress_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "bootstrap.log"
    with open(out, "wb") as fh:
        proc = subprocess.run([sys.executable, "-m", "daemon.cli.main", "bootstrap", "arith", "--steps", "40",
                               "--data-dir", str(tmp_path / "data")], stdout=fh, stderr=subprocess.STDOUT,
                              env={**os.environ, "PROPEL_PROGRESS_INTERVAL_S": "0", "OMP_NUM_THREADS": "1"},
                              timeout=600, check=False)
    text = out.read_text()
    assert proc.returncode == 0, text[-3000:]
    lines = [ln for ln in text.splitlines() if "bootstrap:" in ln]
    assert "bootstrap: started, 40 steps to do" in lines[0]
    progress = [ln for ln in lines if "%)" in ln]
    assert len(progress) >= 30 and all("/s · ETA" in ln and "loss" in ln for ln in progress)
    assert "bootstrap: done, 40/40" in lines[-1]
    assert "\x1b[" not in text  # no terminal control codes in a file
