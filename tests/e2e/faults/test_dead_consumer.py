"""A consumer that leases a task and is killed (SIGKILL) before acking, over the real HTTP API
(uvicorn + :class:`propel_sdk.client.PropelClient`), on SQLite and PostgreSQL:

* while its lease is live, nobody else gets the task;
* once the lease expires, the task is delivered again with ``attempts`` counted up;
* a task that kills every consumer (poison) is dead-lettered after ``max_attempts`` deliveries and
  never delivered again; a late ack with a dead consumer's token is refused (409);
* the other tasks are delivered and acked normally — nothing lost.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient, PropelClientError
from testkit.servers import serve_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOKEN = "fault-test-token"
MAX_ATTEMPTS = 3
LEASE_S = 1.5


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store, list[int]]]:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "faults", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"p{i}", f"{i}*{i}", True, {}) for i in range(3)])
        queue.enqueue(s, [(t, run_id, "mul:1", {"id": t, "schema_version": 1}) for t in ids])
    ctx = ApiContext(store=store, run_name="faults", token=TOKEN, max_attempts=MAX_ATTEMPTS)
    with serve_app(create_app(ctx)) as url:
        yield url, store, ids


def doomed_lease(url: str) -> dict[str, object]:
    """Start a consumer process, read what it leased, kill -9 it."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.faults._dying_consumer", url, TOKEN, str(LEASE_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        got = json.loads(line or b"[]")
        assert len(got) == 1, proc.stderr.read().decode() if proc.stderr and not line else got
        return dict(got[0])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def _state(store: Store, task_id: int) -> tuple[str, int]:
    with store.session() as s:
        row = s.scalars(select(QueueItem).where(QueueItem.task_id == task_id)).one()
        return row.state, row.attempts


def test_dead_consumer_redelivery_and_poison_dead_letter(api: tuple[str, Store, list[int]]) -> None:
    url, store, (poison, second, third) = api
    with PropelClient(url, token=TOKEN) as healthy:
        tokens = []
        for attempt in range(1, MAX_ATTEMPTS + 1):
            got = doomed_lease(url)
            assert (got["id"], got["attempts"]) == (poison, attempt)
            tokens.append(str(got["token"]))
            if attempt == 1:  # the lease is live: another consumer gets a different task
                live = healthy.lease(1, 60, "healthy")
                assert [t.id for t in live] == [second]
                assert healthy.ack(live[0], solved=1, n=8, solver="s") == "acked"
            assert _state(store, poison) == ("leased", attempt)
            time.sleep(LEASE_S + 0.3)  # the killed consumer never renews: its lease expires
        rest = healthy.lease(10, 60, "healthy")
        assert [t.id for t in rest] == [third], "poison must be dead-lettered, not delivered a 4th time"
        assert healthy.ack(rest[0], solved=2, n=8, solver="s") == "acked"
        with pytest.raises(PropelClientError) as late:
            healthy.ack(poison, solved=0, n=8, solver="s", lease_token=tokens[-1])
        assert late.value.status == 409
        assert healthy.lease(10, 60, "healthy") == []
        depths = healthy.status()["queue"]
    assert _state(store, poison) == ("dead", MAX_ATTEMPTS)
    assert depths == {"dead": 1, "acked": 2}
