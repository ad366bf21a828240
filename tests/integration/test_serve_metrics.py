"""`propel serve` exports the daemon's metrics: the same propel_ series, read back from the store (the
run totals the driver saves, the latest gauges, alerts, degraded reasons), scraped from a real HTTP
server (its /metrics used to be empty)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState
from daemon.config import config_from_mapping
from daemon.http.server import start_api_thread
from daemon.http.store_metrics import StoreMetrics
from daemon.loop import health
from daemon.loop.state import DriverState, Totals
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import AlertRule
from daemon.ops.metrics import build_metrics
from daemon.service.api_app import build_api_app
from testkit.servers import free_port, wait_http

pytestmark = pytest.mark.integration
RULE = AlertRule(name="validity_floor", metric="validity", comparator="<", threshold=0.5)


@pytest.fixture
def serve_url(sqlite_store: Store) -> Iterator[tuple[str, Store, int]]:
    port = free_port()
    cfg = config_from_mapping({"run_name": "srv", "api": {"port": port}, "store": {"url": sqlite_store.url}}, env={})
    metrics = build_metrics()
    app = build_api_app(cfg, sqlite_store, metrics, StoreMetrics(sqlite_store, "srv", metrics).refresh)
    stop = start_api_thread(cfg, app)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", 30)
        with sqlite_store.session() as s:
            run_id = repo.get_or_create_run(s, "srv", "h", {})
            repo.load_state(s, run_id)
        yield f"http://127.0.0.1:{port}", sqlite_store, run_id
    finally:
        stop()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_serve_metrics_match_the_daemon_series(serve_url: tuple[str, Store, int]) -> None:
    url, store, run_id = serve_url
    assert _scrape(url)[("propel_degraded", (("reason", health.BUDGET),))] == 0.0
    with store.session() as s:
        for cycle in range(3):
            repo.record_metrics(s, run_id, cycle, {"validity": 0.9 - 0.3 * cycle, "emitted": 10.0 + cycle,
                                                   "retrained": 1.0, "queue_ready": 5.0})
        repo.record_metrics(s, run_id, 3, {"validity": 0.95, "emitted": 100.0})  # cycle 3 still running
        state, _, _ = health.merge({}, {health.BUDGET: health.budget_exhausted(9, 9, None)}, datetime.now(UTC))
        # the daemon's run totals, as the driver saves them with each phase transition
        saved = DriverState(degraded=state, totals=Totals(emitted=10 + 11 + 12, retrains=3)).stored()
        s.execute(update(DaemonState).where(DaemonState.run_id == run_id).values(cycle=3, counters=saved))
    manager = AlertManager(store, run_id, "srv", [RULE])
    manager.on_cycle(2, {"validity": 0.3})
    manager.close()

    got = _scrape(url)
    daemon_side = {(s.name, tuple(sorted(s.labels.items())))
                   for fam in text_string_to_metric_families(generate_latest(build_metrics().registry).decode())
                   for s in fam.samples}
    assert {name for name, _ in daemon_side} <= {name for name, _ in got}  # every series the daemon has
    assert got[("propel_tasks_emitted_total", ())] == 10 + 11 + 12  # the stored run total
    assert got[("propel_aux_retrains_total", ())] == 3
    assert got[("propel_validity_ratio", ())] == pytest.approx(0.95)  # the running cycle's gauge
    assert got[("propel_cycle", ())] == 3 and got[("propel_cycles_total", ())] == 3  # as the driver exports
    assert got[("propel_alert_active", (("rule", "validity_floor"), ("severity", "warning")))] == 1
    assert got[("propel_alerts_fired_total", (("rule", "validity_floor"), ("severity", "warning")))] == 1
    assert got[("propel_degraded", (("reason", health.BUDGET),))] == 1
    again = _scrape(url)  # a second scrape adds nothing
    assert again[("propel_tasks_emitted_total", ())] == 33 and again[("propel_cycles_total", ())] == 3
    assert again[("propel_alerts_fired_total", (("rule", "validity_floor"), ("severity", "warning")))] == 1


def test_the_serve_command_exports_them(sqlite_store: Store, tmp_path: Path) -> None:
    """The real `propel serve` process (its /metrics was empty: the app was built without the registry)."""
    with sqlite_store.session() as s:
        run_id = repo.get_or_create_run(s, "srv", "h", {})
        repo.load_state(s, run_id)
        repo.record_metrics(s, run_id, 0, {"emitted": 7.0, "validity": 0.8})
        s.execute(update(DaemonState).where(DaemonState.run_id == run_id)
                  .values(cycle=1, counters=DriverState(totals=Totals(emitted=7)).stored()))
    port = free_port()
    config = tmp_path / "serve.toml"
    config.write_text(f'run_name = "srv"\n[store]\nurl = "{sqlite_store.url}"\n[api]\nport = {port}\n')
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(config), "serve"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", 60, proc)
        got = _scrape(f"http://127.0.0.1:{port}")
        assert got[("propel_tasks_emitted_total", ())] == 7 and got[("propel_validity_ratio", ())] == 0.8
        assert ("propel_degraded", (("reason", health.BUDGET),)) in got
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.stdout is not None
    # its start-up heap was frozen out of the GC's scans (full collections stalled leases ~200 ms)
    assert "propel serve: " in (out := proc.stdout.read().decode()) and "(gc.freeze)" in out, out[-2000:]
