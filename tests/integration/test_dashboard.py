"""The dashboard served by a real uvicorn server, rendered by headless Chromium (no JS, no CDN)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from curriculum.store import queue as q
from curriculum.store import repo
from curriculum.store.db import Store
from daemon.http.dashboard import collect, render_page, router
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import DEFAULT_RULES
from testkit.servers import free_port
from tests.conftest import require_service

pytestmark = pytest.mark.integration
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _seed(store: Store, run: str = "demo", cycles: int = 16) -> None:
    with store.session() as sess:
        run_id = repo.get_or_create_run(sess, run, "h", {})
    manager = AlertManager(store, run_id, run, DEFAULT_RULES)
    for c in range(cycles):
        bad = 6 <= c < 11
        values = {"top_topic_share": 0.75 if bad else 0.2, "distinct3": 0.3 if bad else 0.7,
                  "self_bleu3": 0.9 if bad else 0.6, "validity": 0.96, "novel_share": 0.05 if bad else 0.8,
                  "reward_mean": -1.0 + 0.1 * c,
                  "reward_var": 0.5, "probe_precision": 0.2 if bad else 0.6, "false_positive_rate": 0.3,
                  "spotcheck_utility": 0.4, "solver_budget_used": 0.5, "emitted": 8, "solver_trials": 64,
                  "queue_ready": 5 + c}
        with store.session() as sess:
            repo.record_metrics(sess, run_id, c, values)
            tasks = [repo.NewTask(domain="arith", content_hash=f"{run}-{c}-{i}", text=f"{c}+{i}", valid=True,
                                  topic="+:1", cycle=c) for i in range(4)]
            ids = repo.add_tasks(sess, run_id, tasks)
            for i, tid in enumerate(ids):
                repo.upsert_label(sess, tid, "synthetic", "spotcheck", run_id=run_id, k=8, solved=i, valid_trials=8,
                                  band=(1, 3), in_band=1 <= i <= 3 if i < 3 else None)
            q.enqueue(sess, [(tid, run_id, "+:1", {"id": tid}) for tid in ids[:2]])
        manager.on_cycle(c, values, dominant_topic="+:1")
    with store.session() as sess:
        for k, role in enumerate(("primary", "aux", "aux")):
            repo.register_probe(sess, f"probe-{role}-{k}", role, f"file:///p{k}", "ref",
                                {"metrics": {"balanced_accuracy": 0.7 + 0.05 * k, "ece": 0.05}}, active=k != 1,
                                run_id=run_id)


@pytest.fixture
def dashboard_url(sqlite_store: Store) -> Iterator[str]:
    _seed(sqlite_store)
    app = FastAPI()
    app.state.store = sqlite_store
    app.state.run_name = "demo"
    app.include_router(router)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def _run_chromium(exe: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_dashboard_renders_in_headless_chromium(dashboard_url: str) -> None:
    exe = _chromium()
    if exe is None:
        print("chromium not found: install Debian's `chromium` package (apt-get install -y chromium)")
    require_service("chromium", exe is not None, "apt-get install -y chromium")
    assert exe is not None
    url = f"{dashboard_url}/dashboard"
    dom = _run_chromium(exe, "--dump-dom", url)
    assert "propel — run demo" in dom
    # alert timeline, 5 metric panels (predicted vs verified utility since #34), queue, spot-check, probes
    assert len(re.findall(r"<svg\b", dom)) == 9
    for plot in ("alert-timeline", "metrics-collapse", "metrics-generator", "metrics-probes", "metrics-throughput",
                 "metrics-utility", "queue", "spotcheck", "probes"):
        assert f'data-plot="{plot}"' in dom, plot
    rows = re.findall(r'<tr class="alert-row" data-rule="([^"]+)"', dom)
    assert {"topic_collapse", "distinct3_low", "probe_precision_low", "novelty_low"} <= set(rows)
    for name in ("top_topic_share", "distinct3", "self_bleu3", "validity", "novel_share", "probe_precision",
                 "reward_var", "queue_ready", "probe-aux-2", "in band", "out of band"):
        assert name in dom, name
    assert "<script" not in dom and "<link" not in dom and "<img" not in dom  # nothing to fetch
    assert re.findall(r'(?:src|href)="(?!/dashboard/|#)[^"]*"', dom) == []
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    _run_chromium(exe, f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars", url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_dashboard_data_json(dashboard_url: str) -> None:
    data = httpx.get(f"{dashboard_url}/dashboard/data.json", timeout=30).json()
    assert data["run"] == "demo" and data["run_found"] and data["last_cycle"] == 15
    assert data["metrics"]["top_topic_share"][6] == [6, 0.75]
    assert {a["rule"] for a in data["alerts"]} >= {"topic_collapse", "topic_flooding"}
    assert data["queue"] == {"ready": 32, "leased": 0, "acked": 0, "dead": 0, "stale": 0}
    assert [p["name"] for p in data["probes"]] == ["probe-primary-0", "probe-aux-1", "probe-aux-2"]
    assert data["spotcheck"][0] == {"cycle": 0, "in_band": 2, "out_of_band": 1, "undetermined": 1}
    [version] = data["frontier"]["versions"]  # one solver, unversioned: its spot-check labels and rate
    assert (version["solver"], version["version"], version["trainer_labels"]) == ("synthetic", "", 0)
    assert version["spotcheck_labels"] > 0 and 0 <= version["spotcheck_in_band_rate"] <= 1
    assert data["frontier"]["champion"]["probe"] == "probe-primary-0"
    page = httpx.get(f"{dashboard_url}/dashboard", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="frontier"' in page.text and "champion primary probe: probe-primary-0" in page.text


def test_page_is_re_rendered_only_when_data_changes(dashboard_url: str, sqlite_store: Store) -> None:
    first = httpx.get(f"{dashboard_url}/dashboard", timeout=30).text
    assert httpx.get(f"{dashboard_url}/dashboard", timeout=30).text == first  # cached: same render time
    with sqlite_store.session() as sess:
        run_id = repo.get_or_create_run(sess, "demo", "h", {})
        repo.record_metrics(sess, run_id, 16, {"validity": 0.5})
    changed = httpx.get(f"{dashboard_url}/dashboard", timeout=30).text
    assert changed != first and "last cycle 16" in changed


def test_unknown_run_and_masked_url(sqlite_store: Store) -> None:
    sqlite_store.url = "postgresql+psycopg://propel:s3cret@db:5432/propel"  # what the page shows, not used
    data = collect(sqlite_store, "not-started")
    assert data.run_id is None and data.store_url == "postgresql+psycopg://propel:***@db:5432/propel"
    page = render_page(data, DEFAULT_RULES)
    assert "s3cret" not in page and "has not started yet" in page and "no alert has fired" in page
