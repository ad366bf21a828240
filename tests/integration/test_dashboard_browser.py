"""The dashboard in a real browser (Playwright driving Debian's chromium) against a running API.

The page loads, the status strip shows phase, cycle, heartbeat, leader and budget, a degraded
banner names its reason, the panels fill with labelled charts, the probe tables stay short, and an
alert that fires appears after a reload. Skips (fails under CI) when Playwright or a chromium
binary is missing: browser downloads are not available here, `.ci/run` installs Debian's chromium.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState
from daemon.config import config_from_mapping
from daemon.http.server import start_api_thread
from daemon.loop import health
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import AlertRule
from daemon.ops.metrics import build_metrics
from daemon.service.api_app import build_api_app
from testkit.servers import free_port, wait_http
from tests.conftest import require_service

RULE = AlertRule(name="validity_floor", metric="validity", comparator="<", threshold=0.5)


def _browser_exe() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@pytest.fixture
def running_api(sqlite_store: Store, tmp_path: Path) -> Iterator[tuple[str, Store, int]]:
    now = datetime.now(UTC)
    with sqlite_store.session() as s:
        run_id = repo.get_or_create_run(s, "ui", "h", {})
        repo.load_state(s, run_id)
        for cycle in range(4):
            repo.record_metrics(s, run_id, cycle, {"validity": 0.9, "emitted": 12_345.0 + cycle,
                                                   "solver_trials": 80.0 * (cycle + 1), "queue_ready": 40.0 * cycle,
                                                   "solver_budget_used": 0.25 * (cycle + 1)})
        for i in range(14):  # more probe versions than the change table shows
            pid = repo.register_probe(s, f"ui-aux-{i}", "aux", f"/p/{i}", "sha256:x", {}, run_id=run_id)
        repo.set_active_probes(s, [pid], run_id)
        state, _, _ = health.merge({}, {health.BUDGET: health.budget_exhausted(512, 512, now - timedelta(minutes=30))},
                                   now)
        s.execute(update(DaemonState).where(DaemonState.run_id == run_id).values(
            phase="spotcheck", cycle=4, heartbeat_at=now, leader_id="host-a:42:abc123",
            counters={"degraded": state}))
    port = free_port()
    cfg = config_from_mapping({"run_name": "ui", "api": {"port": port}, "store": {"url": sqlite_store.url},
                               "alerts": {"rules": [RULE.model_dump(mode="json")]}}, env={})
    stop = start_api_thread(cfg, build_api_app(cfg, sqlite_store, build_metrics()))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", 30)
        yield url, sqlite_store, run_id
    finally:
        stop()


@pytest.fixture
def page() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require_service("playwright", sync_playwright is not None, "pip install playwright (dev extras)")
    exe = _browser_exe()
    require_service("chromium", exe is not None, "apt-get install -y chromium (browser downloads are not available)")
    assert sync_playwright is not None and exe is not None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 1600})
        finally:
            browser.close()


def test_dashboard_status_panels_and_a_firing_alert(running_api: tuple[str, Store, int], page: Any) -> None:
    url, store, run_id = running_api
    page.goto(f"{url}/dashboard", wait_until="load")
    stat = lambda key: page.locator(f'[data-stat="{key}"] .value').inner_text()  # noqa: E731
    assert stat("phase") == "spotcheck" and stat("cycle") == "4"
    assert "s ago (limit 30 s)" in stat("heartbeat") and stat("leader") == "host-a:42:abc123"
    assert stat("budget") == "100% of 512 tasks/hour"
    banner = page.locator(f'[data-banner="{health.BUDGET}"]')
    assert banner.is_visible() and "spot-checks paused until" in banner.inner_text()
    for plot in ("metrics-collapse", "metrics-generator", "metrics-probes", "metrics-throughput", "queue"):
        assert page.locator(f'figure[data-plot="{plot}"] svg').count() == 1, plot
    throughput = page.locator('figure[data-plot="metrics-throughput"]').inner_text()
    assert "emitted (per cycle, not cumulative)" in throughput
    assert "solver_trials (rolling 1 h, not cumulative)" in throughput and "solver attempts" in throughput
    assert page.locator("tr.active-probe").count() == 1
    assert page.locator("tr.probe-change").count() == 10 and "4 older probe version(s)" in page.content()
    assert page.locator('tr.alert-row[data-rule="validity_floor"]').count() == 0

    with store.session() as s:  # cycle 4 comes in with a low validity: the rule fires
        repo.record_metrics(s, run_id, 4, {"validity": 0.1})
    manager = AlertManager(store, run_id, "ui", [RULE])
    assert [e.rule for e in manager.on_cycle(4, {"validity": 0.1}).fired] == ["validity_floor"]
    page.reload(wait_until="load")
    row = page.locator('tr.alert-row[data-rule="validity_floor"]')
    assert row.count() == 1 and row.is_visible() and "open" in row.inner_text()
    data = page.request.get(f"{url}/dashboard/data.json").json()
    assert data["status"]["live"] and data["status"]["degraded"][0]["reason"] == health.BUDGET
