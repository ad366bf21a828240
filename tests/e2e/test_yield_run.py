"""``api.yield_to_api`` in a real ``propel run``: after a trainer leases and acks a task over the run's own
API, the training work is held by the gate ``runtime.run`` wires in (phase starts, the models' forward
passes), and the held seconds show on the run's ``/metrics``. The idle window is
set to a minute, so one answered queue request keeps the API "busy" for the rest of the test: the
assertion does not depend on when the request lands relative to the training."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from curriculum.store.db import Store
from curriculum.store.models import QueueItem
from propel_sdk.client import PropelClient
from testkit.servers import free_port
from tests.e2e.conftest import kill, start_daemon, wait_until, write_config

pytestmark = pytest.mark.slow
METRIC = "propel_work_yielded_seconds_total"
#: one queue request keeps the training held for a minute, in holds of 0.2 s then 0.2 s free (floor 0.5)
YIELD = "yield_idle_ms = 60000\nyield_max_s = 0.2\nyield_floor = 0.5\n"


def _queued(store: Store) -> int:
    try:
        with store.session() as s:
            return int(s.scalar(select(func.count()).select_from(QueueItem)) or 0)
    except OperationalError:  # the daemon has not created the schema yet
        return 0


def _yielded(url: str) -> float:
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(METRIC + " ")]
    return values[0] if values else 0.0


def test_training_yields_to_the_queue_api_of_its_run(tmp_path: Path, tiny_generator: Path) -> None:
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    port = free_port()
    cfg = write_config(tmp_path / "c.toml", tiny_generator, tmp_path / "data", db, "yield", YIELD, port=port)
    log, url, store = tmp_path / "daemon.log", f"http://127.0.0.1:{port}", Store(db)
    proc = start_daemon(cfg, log)  # no cycle limit: the training goes on after the first emission
    try:
        wait_until(lambda: _queued(store) >= 1, 900, "a queued task", proc, log)
        assert _yielded(url) == 0.0  # no queue request with work yet: nothing was held
        with PropelClient(url) as client:
            tasks = client.lease(n=1, lease_s=60, consumer="trainer")
            assert len(tasks) == 1
            assert client.ack(tasks[0], solved=1, n=8, solver="pol@1") == "acked"
        wait_until(lambda: _yielded(url) > 0, 600, f"{METRIC} > 0", proc, log)
        # the modules its phases imported lazily were frozen out of the collector's scans, as the start-up heap
        assert "(a phase imported" in (text := log.read_text()) and "(gc.freeze)" in text, text[-3000:]
    finally:
        kill(proc, signal.SIGTERM)
        store.dispose()
