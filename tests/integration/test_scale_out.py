"""Two API replicas (real ``propel serve`` processes) on one PostgreSQL store, leased concurrently by
consumers spread over both: every task is delivered exactly once while leases are live, and
nothing is lost; a lease that expires on one replica is redelivered by the other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from curriculum.store import queue, repo
from curriculum.store.db import Store
from propel_sdk.client import Ack, PropelClient
from testkit.servers import free_port, wait_http

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TASKS = 600


@pytest.fixture
def replicas(pg_store: Store, tmp_path: Path) -> Iterator[list[str]]:
    urls, procs = [], []
    try:
        for i in range(2):
            port = free_port()
            cfg = tmp_path / f"api{i}.toml"
            cfg.write_text(f'run_name = "scale"\ndata_dir = "{tmp_path}"\n[store]\nurl = "{pg_store.url}"\n'
                           f"pool_size = 4\n[api]\nport = {port}\n")
            log = open(tmp_path / f"api{i}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "serve"],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            wait_http(f"http://127.0.0.1:{port}/openapi.json", 60, procs[-1])
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)


def test_two_api_replicas_one_store_no_double_delivery(pg_store: Store, replicas: list[str]) -> None:
    with pg_store.session() as s:
        run_id = repo.get_or_create_run(s, "scale", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"s{i}", f"{i}", True, {}) for i in range(TASKS)])
        queue.enqueue(s, [(t, run_id, "t", {"id": t}) for t in ids])
    delivered: list[tuple[int, str]] = []
    lock = threading.Lock()

    def consume(url: str, name: str) -> None:
        with PropelClient(url) as client:
            while batch := client.lease(16, 600, name):
                with lock:
                    delivered.extend((t.id, url) for t in batch)
                statuses = client.ack_many([Ack(t, 1, 8, name) for t in batch])
                assert set(statuses.values()) == {"acked"}

    threads = [threading.Thread(target=consume, args=(replicas[i % 2], f"c{i}")) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    got = [tid for tid, _ in delivered]
    assert sorted(got) == ids  # each task exactly once, none lost
    assert {url for _, url in delivered} == set(replicas)  # both replicas served leases
    with pg_store.session() as s:
        assert repo.queue_depths(s, run_id) == {"acked": TASKS}


def test_lease_expired_on_one_replica_is_redelivered_by_the_other(pg_store: Store, replicas: list[str]) -> None:
    with pg_store.session() as s:
        run_id = repo.get_or_create_run(s, "scale", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"e{i}", f"{i}", True, {}) for i in range(3)])
        queue.enqueue(s, [(t, run_id, "t", {"id": t}) for t in ids])
    with PropelClient(replicas[0]) as a, PropelClient(replicas[1]) as b:
        first = a.lease(3, 1, "a")
        assert sorted(t.id for t in first) == ids and b.lease(3, 60, "b") == []
        time.sleep(1.5)
        again = b.lease(3, 60, "b")
        assert sorted(t.id for t in again) == ids and all(t.attempts == 2 for t in again)
        assert a.ack_many([Ack(t, 1, 8, "a") for t in first]) == dict.fromkeys(ids, "lease_lost")
        assert b.ack_many([Ack(t, 1, 8, "b") for t in again]) == dict.fromkeys(ids, "acked")
