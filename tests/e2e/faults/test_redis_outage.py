"""Redis (the Celery broker) stopped for ~12 s while spot-checks are being dispatched.

While it is down, :class:`daemon.service.spot.CelerySpotChecker` raises :class:`daemon.loop.ports.DispatchError`
quickly (the driver defers and retries next cycle — see
``tests/integration/test_driver.py::test_broker_down_defers_spotchecks_and_rl_goes_on``). The worker
that was running through the outage reconnects by itself; once Redis is back the same dispatch
succeeds and the worker writes every trial exactly once (50 tasks × k=8 = 400 rows).

Runs against a PRIVATE ``redis-server`` (own port, no persistence), never the shared one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from curriculum.solvers import build_solver
from curriculum.store.db import Store
from daemon.loop.ports import DispatchError
from daemon.service.spot import CelerySpotChecker
from tests.e2e.faults._private import private_redis
from tests.integration.test_celery_spotcheck import N_TASKS, K, _config, _count, _tasks, _wait_for
from workers.local import start_worker, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OUTAGE_S = 12.0


def _configure(cfg: Path) -> str:
    from daemon.config import load_config
    from daemon.service.settings import worker_settings
    from workers import runtime
    from workers.app import configure_app

    settings = worker_settings(load_config(cfg))
    runtime.configure(settings)
    configure_app(settings)
    return settings.run_name


def test_dispatch_fails_fast_while_redis_is_down_then_completes_exactly_once(
        tmp_path: Path, pg_store: Store, pg_url: str) -> None:
    ids = _tasks(pg_store)
    half = N_TASKS // 2
    log = tmp_path / "worker.log"
    with private_redis() as redis:
        cfg, _ = _config(tmp_path, pg_url, redis.url, latency_s=0.05)
        spot = CelerySpotChecker(build_solver("synthetic").solver_id, _configure(cfg), batch_size=5)
        worker = start_worker(cfg, log)
        try:
            spot.dispatch(ids[:half], K)
            assert _wait_for(pg_store, half * K, 90, worker, log) == half * K
            redis.stop()
            down_at = time.monotonic()
            with pytest.raises(DispatchError, match="deferred"):
                spot.dispatch(ids[half:], K)
            failed_after = time.monotonic() - down_at
            print(f"redis down: dispatch raised DispatchError after {failed_after:.2f} s")
            time.sleep(max(0.0, OUTAGE_S - failed_after))
            assert worker.poll() is None, "the worker must ride out a broker outage, not exit"
            assert _count(pg_store)[0] == half * K
            redis.start()
            spot.dispatch(ids[half:], K)  # the driver's retry next cycle: same deterministic task ids
            final = _wait_for(pg_store, N_TASKS * K, 120, worker, log)
            time.sleep(1.0)  # let any duplicate delivery land before counting
            total, distinct = _count(pg_store)
        finally:
            stop(worker)
    assert failed_after < 10, f"dispatch took {failed_after:.1f} s to fail; the driver would stall"
    assert final == total == distinct == N_TASKS * K, log.read_text()[-2000:]
