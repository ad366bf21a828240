"""Real Celery worker processes on Redis and on RabbitMQ, writing to the real PostgreSQL.

50 tasks × k=8 → exactly 400 trial rows; then a worker killed with SIGKILL mid-batch and a fresh
worker started → still exactly 400 rows, none duplicated, none missing.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.solvers import build_solver
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from workers.local import start_worker, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
N_TASKS, K = 50, 8


def _config(tmp_path: Path, pg_url: str, broker_url: str, latency_s: float) -> tuple[Path, str]:
    run = f"ct{uuid.uuid4().hex[:8]}"
    path = tmp_path / "worker.toml"
    path.write_text(f'''run_name = "{run}"
data_dir = "{tmp_path}"
[store]
url = "{pg_url}"
[broker]
url = "{broker_url}"
visibility_timeout_s = 8
task_time_limit_s = 6
[solver]
backend = "synthetic"
artificial_latency_s = {latency_s}
''')
    return path, run


def _tasks(store: Store) -> list[int]:
    dom, rng = ArithDomain(), random.Random(0)
    new = []
    while len(new) < N_TASKS:
        v = dom.check(dom.parse(random_expression(rng, rng.randint(1, 6))).task)  # type: ignore[arg-type]
        if v.valid and v.task.content_hash not in {t.content_hash for t in new}:
            new.append(repo.NewTask("arith", v.task.content_hash, v.task.text, True, v.task.payload))
    with store.session() as s:
        return repo.add_tasks(s, None, new)


def _count(store: Store) -> tuple[int, int]:
    with store.session() as s:
        total = s.execute(select(func.count()).select_from(SolverTrial)).scalar_one()
        distinct = s.execute(select(func.count()).select_from(
            select(SolverTrial.task_id, SolverTrial.attempt).distinct().subquery())).scalar_one()
    return int(total), int(distinct)


def _wait_for(store: Store, target: int, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        total, _ = _count(store)
        if total >= target:
            return total
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    return _count(store)[0]


def _dispatch(cfg: Path, ids: list[int]) -> None:
    from daemon.config import load_config
    from daemon.service.settings import worker_settings
    from workers import runtime
    from workers.app import configure_app
    from workers.tasks import dispatch_spotchecks

    settings = worker_settings(load_config(cfg))
    runtime.configure(settings)
    configure_app(settings)
    solver_id = build_solver("synthetic").solver_id
    assert len(dispatch_spotchecks(ids, K, solver_id, settings.run_name, batch_size=5)) == N_TASKS // 5


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> Iterator[str]:
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "amqp_url")
    yield url


def test_exactly_once_trials_with_worker_kill(tmp_path: Path, pg_store: Store, pg_url: str, broker: str) -> None:
    cfg, _ = _config(tmp_path, pg_url, broker, latency_s=0.6)
    ids = _tasks(pg_store)
    log = tmp_path / "worker.log"
    first = start_worker(cfg, log)
    try:
        _dispatch(cfg, ids)
        seen = _wait_for(pg_store, 1, 90, first, log)
        assert 0 < seen < N_TASKS * K, f"kill must land mid-batch, saw {seen} rows"
    finally:
        stop(first, signal.SIGKILL)
    at_kill = _count(pg_store)[0]
    second = start_worker(cfg, log)
    try:
        final = _wait_for(pg_store, N_TASKS * K, 120, second, log)
        time.sleep(1.0)  # let any duplicate delivery land before counting
        total, distinct = _count(pg_store)
    finally:
        stop(second)
    assert at_kill < N_TASKS * K
    assert final == total == distinct == N_TASKS * K, log.read_text()[-2000:]
