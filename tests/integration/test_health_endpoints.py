"""/healthz, /v1/status and /dashboard when the store is down: answers, not 500s; no password leaks."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from curriculum.store.db import Store
from daemon.config import config_from_mapping
from daemon.http.server import start_api_thread
from daemon.ops.metrics import build_metrics
from daemon.service.api_app import build_api_app
from testkit.servers import free_port, wait_http

pytestmark = pytest.mark.integration


@pytest.fixture
def dead_store_api() -> Iterator[str]:
    port = free_port()
    dsn = f"postgresql+psycopg://propel:hunter2@127.0.0.1:{free_port()}/propel"  # nothing listens there
    cfg = config_from_mapping({"api": {"port": port}, "store": {"url": dsn}}, env={})
    store = Store(dsn)
    stop = start_api_thread(cfg, build_api_app(cfg, store, build_metrics()))
    try:
        wait_http(f"http://127.0.0.1:{port}/docs", 30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop()
        store.dispose()


def test_a_dead_store_is_reported_not_crashed_on(dead_store_api: str) -> None:
    health = httpx.get(f"{dead_store_api}/healthz", timeout=30)
    assert health.status_code == 503 and health.json()["problems"][0].startswith("store unreachable")
    status = httpx.get(f"{dead_store_api}/v1/status", timeout=30)
    assert status.status_code == 503 and status.json()["detail"].startswith("store unreachable")
    data = httpx.get(f"{dead_store_api}/dashboard/data.json", timeout=30)
    assert data.status_code == 503 and data.json()["status"]["error"].startswith("store unreachable")
    page = httpx.get(f"{dead_store_api}/dashboard", timeout=30)
    assert page.status_code == 503 and 'data-banner="store"' in page.text
    for text in (health.text, status.text, data.text, page.text):
        assert "hunter2" not in text
