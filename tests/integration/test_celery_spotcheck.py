"""Real Celery worker processes on Redis and on RabbitMQ, writing to the real PostgreSQL.

50 tasks × k=8 → exactly 400 trial rows; then a worker killed with SIGKILL mid-batch and a fresh
worker started → still exactly 400 rows, none duplicated, none missing. On Redis a message the killed
worker had popped but not yet recorded as unacked is lost (kombu's window, ``workers/app.py``); the
leader sends a check with no label again after its deadline, and so does this test, with the same function.
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
from workers.runtime import WorkerSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
N_TASKS, K = 50, 8


def _config(tmp_path: Path, pg_url: str, broker_url: str, latency_s: float, visibility_s: int = 8,
            name: str = "worker") -> tuple[Path, str]:
    run = f"ct{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.toml"
    path.write_text(f'''run_name = "{run}"
data_dir = "{tmp_path}"
[store]
url = "{pg_url}"
[broker]
url = "{broker_url}"
visibility_timeout_s = {visibility_s}
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


def _wait_for(store: Store, target: int, timeout_s: float, proc: subprocess.Popen[bytes], log: Path,
              quiet_s: float | None = None) -> int:
    """Trial rows once there are ``target``, after ``timeout_s``, or once none came for ``quiet_s``."""
    deadline, last, since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        total, _ = _count(store)
        if total >= target:
            return total
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if total != last:
            last, since = total, time.monotonic()
        elif quiet_s is not None and time.monotonic() - since > quiet_s:
            break
        time.sleep(0.2)
    return _count(store)[0]


def _unlabelled(store: Store, ids: list[int]) -> list[int]:
    """Tasks with fewer than K trial rows: what the leader would send again past its deadline."""
    with store.session() as s:
        rows = dict(s.execute(select(SolverTrial.task_id, func.count()).group_by(SolverTrial.task_id)).all())
    return [t for t in ids if rows.get(t, 0) < K]


def _settings(cfg: Path) -> WorkerSettings:
    from daemon.config import load_config
    from daemon.service.settings import worker_settings

    return worker_settings(load_config(cfg))


def _dispatch(cfg: Path, ids: list[int]) -> None:
    """``ids`` to the run's queue in batches of 5, as the leader dispatches them."""
    from workers import runtime
    from workers.app import configure_app
    from workers.tasks import dispatch_spotchecks

    settings = _settings(cfg)
    runtime.configure(settings)
    configure_app(settings)
    solver_id = build_solver("synthetic").solver_id
    assert len(dispatch_spotchecks(ids, K, solver_id, settings.run_name, batch_size=5)) == -(-len(ids) // 5)


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
        # restored (Redis: once older than the 8 s visibility timeout) or redelivered (RabbitMQ: at once)
        _wait_for(pg_store, N_TASKS * K, 120, second, log, quiet_s=30)
        lost = _unlabelled(pg_store, ids)
        if lost:  # the leader's deadline: only the missing trials are attempted
            _dispatch(cfg, lost)
        final = _wait_for(pg_store, N_TASKS * K, 120, second, log)
        time.sleep(1.0)  # let any duplicate delivery land before counting
        total, distinct = _count(pg_store)
    finally:
        stop(second)
    assert at_kill < N_TASKS * K
    assert final == total == distinct == N_TASKS * K, log.read_text()[-2000:]
    # what was in flight at the kill: at most the two messages a 2-process worker holds, and only on Redis
    assert len(lost) <= (10 if broker.startswith("redis") else 0), f"{len(lost)} tasks never came back: {lost}"


def test_a_worker_killed_mid_sweep_holds_the_restore_lock_one_interval_not_five_minutes(
        tmp_path: Path, pg_url: str, redis_url: str) -> None:
    """The Redis sweep's lock is shared by every worker on the database; a holder killed mid-sweep never
    releases it. The lock a sweep takes (kombu's own ``Mutex``, on the app's real connection) lapses by
    the next sweep, so the other workers' restores go on."""
    from kombu.transport.redis import Mutex

    from workers.app import configure_app, restore_interval_s

    app = configure_app(_settings(_config(tmp_path, pg_url, redis_url, latency_s=0.0)[0]))
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        client = channel.client
        # the sweep's expiry on a key of this test's own (the shared one belongs to the other tests' workers)
        key = f"{channel.unacked_mutex_key}.{uuid.uuid4().hex[:8]}"
        sweep = Mutex(client, key, channel.unacked_mutex_expire)
        sweep.__enter__()  # the sweeper dies here: nothing releases the lock
        try:
            ttl = client.ttl(client.global_keyprefix + key)  # TTL is not among the commands kombu prefixes
            assert 0 < ttl <= restore_interval_s(8) == 2, f"a dead sweeper's lock lives {ttl} s"
        finally:
            client.delete(key)


def test_a_runs_sweep_leaves_another_runs_messages_alone(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    """Two runs on one Redis database: run ``fast`` (visibility 8 s) sweeps for dead workers' messages while
    run ``slow`` (an hour) has one in flight for 100 s. Kombu's unacked bookkeeping is one set of keys per
    database unless prefixed: the fast run's sweep took the slow run's message back to its queue, and a
    second worker ran it while the first still did. Each run's keys start with its own prefix now."""
    from kombu.transport.redis import dumps

    from workers.app import configure_app, key_prefix, queue_name

    fast = _settings(_config(tmp_path, pg_url, redis_url, 0.0, 8, "fast")[0])
    slow = _settings(_config(tmp_path, pg_url, redis_url, 0.0, 3600, "slow")[0])
    tag = uuid.uuid4().hex
    with configure_app(slow).connection_for_write() as conn:  # a live worker of the slow run holds a message
        ch = conn.default_channel
        raw = {"body": "", "properties": {"delivery_tag": tag}, "headers": {}}
        ch.client.zadd(ch.unacked_index_key, {tag: time.time() - 100})
        ch.client.hset(ch.unacked_key, tag, dumps([raw, queue_name(slow.run_name), queue_name(slow.run_name)]))
    with configure_app(fast).connection_for_write() as conn:  # the fast run's sweep
        conn.default_channel.qos.restore_visible(num=100, interval=1)
    with configure_app(slow).connection_for_write() as conn:
        ch = conn.default_channel
        try:
            held = [t.decode() for t in ch.client.zrange(ch.unacked_index_key, 0, -1)]  # prefixed by kombu
            assert tag in held and ch.client.hget(ch.unacked_key, tag) is not None, "the other run's sweep took it"
        finally:
            ch.client.zrem(ch.unacked_index_key, tag)
            ch.client.hdel(ch.unacked_key, tag)
        assert getattr(ch.client, "global_keyprefix", None) == key_prefix(slow.run_name)


def test_a_process_that_dispatches_for_two_runs_sends_each_to_its_own_run(
        tmp_path: Path, pg_url: str, redis_url: str) -> None:
    """Dispatch goes through the app's pooled connections. Configured for another run on the same broker, the
    app must drop them: a pooled connection keeps the first run's key prefix, and the second run's jobs
    went to keys its worker never reads (the retrain test after the frontier one: pending for 180 s)."""
    from workers.app import configure_app, key_prefix

    for name in ("first", "second"):
        settings = _settings(_config(tmp_path, pg_url, redis_url, 0.0, name=name)[0])
        app = configure_app(settings)
        with app.pool.acquire(block=True) as conn, app.amqp.producer_pool.acquire(block=True) as producer:
            assert conn.default_channel.client.global_keyprefix == key_prefix(settings.run_name)
            assert producer.channel.client.global_keyprefix == key_prefix(settings.run_name)
