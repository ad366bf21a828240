"""The trainer SDK against a real API server and PostgreSQL: the schema check on lease, and retries
through a daemon restart (the server is stopped and started again on the same port)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TypeVar

import pytest
from sqlalchemy import func, select

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import Label
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import Ack, PropelClient
from propel_sdk.schema import SchemaVersionError
from testkit.seeding import seed, wait_renewed
from testkit.servers import RestartableServer, free_port

pytestmark = pytest.mark.integration
TOKEN = "sdk-t0k3n"
T = TypeVar("T")


@pytest.fixture
def server(pg_store: Store) -> Iterator[RestartableServer]:
    srv = RestartableServer(lambda: create_app(ApiContext(store=pg_store, run_name="sdk", token=TOKEN,
                                                          max_attempts=3)))
    srv.start()
    yield srv
    srv.stop()


class FirstRetry(logging.Handler):
    """Sets ``event`` on the client's first retry WARNING and keeps the lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.event.set()


@pytest.fixture
def retries() -> Iterator[FirstRetry]:
    handler = FirstRetry()
    logger = logging.getLogger("propel_sdk")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_unknown_schema_version_fails_loudly_and_gives_the_batch_back(server: RestartableServer,
                                                                      pg_store: Store) -> None:
    ok = seed(pg_store, 2, run="sdk")
    newer = seed(pg_store, 1, run="sdk", schema_version=2)
    with PropelClient(server.url, token=TOKEN) as client:
        with pytest.raises(SchemaVersionError) as err:
            client.lease(5, lease_s=300, consumer="old-trainer")
        assert str(err.value) == (f"task {newer[0]}: message schema_version 2 is newer than this SDK (supports 1): "
                                  "upgrade propel-curriculum")
        with pg_store.session() as s:
            assert repo.queue_depths(s) == {"ready": 3}  # nacked, not stranded until the lease expires
        got = client.lease(2, lease_s=300, consumer="old-trainer")  # the readable ones still flow
        assert sorted(t.id for t in got) == ok and got[0].message["schema_version"] == 1


def test_calls_ride_out_a_daemon_restart(server: RestartableServer, pg_store: Store, retries: FirstRetry) -> None:
    ids = seed(pg_store, 4, run="sdk")
    with PropelClient(server.url, token=TOKEN, backoff_s=0.05, max_backoff_s=0.5, max_retries=100) as client:
        got = client.lease(2, lease_s=300, consumer="trainer")

        def through_restart(call: Callable[[], T]) -> T:
            server.stop()
            retries.event.clear()
            server.start(when=retries.event)  # comes back only after the client has retried once
            result = call()
            assert retries.event.is_set(), "the call was not retried"
            return result

        assert through_restart(lambda: client.ack(got[0], solved=2, n=8, solver="pol@1")) == "acked"
        assert through_restart(lambda: client.ack_many([Ack(got[1], solved=1, n=8, solver="pol@1")])) == {
            got[1].id: "acked"}
        again = through_restart(lambda: client.lease(5, lease_s=300, consumer="trainer"))
        assert sorted(t.id for t in again) == ids[2:]
        # an ack retried after it landed answers already_acked, and the outcome is kept once
        assert client.ack(got[0], solved=2, n=8, solver="pol@1") == "already_acked"
    assert any(f"POST {server.url}/v1/tasks/{got[0].id}/ack failed (ConnectError" in line and "retry 1/100 in" in line
               for line in retries.lines), retries.lines
    with pg_store.session() as s:
        assert repo.queue_depths(s) == {"acked": 2, "leased": 2}
        assert s.scalar(select(func.count()).select_from(Label).where(Label.task_id == got[0].id)) == 1


def test_retries_are_bounded_then_the_error_is_raised(retries: FirstRetry) -> None:
    import httpx

    url = f"http://127.0.0.1:{free_port()}"
    with PropelClient(url, token=TOKEN, max_retries=2, backoff_s=0.01) as client, \
            pytest.raises(httpx.ConnectError):
        client.announce("pol", 3)
    assert len(retries.lines) == 2 and "retry 2/2" in retries.lines[-1]


def test_iterate_keeps_a_held_batch_leased(server: RestartableServer, pg_store: Store) -> None:
    ids = seed(pg_store, 3, run="sdk")
    statuses = []
    with PropelClient(server.url, token=TOKEN) as client:
        for task in client.iterate(batch=2, lease_s=2, consumer="slow-trainer"):
            if task.id == ids[1]:  # the second task of the batch waits while the first trains
                wait_renewed(pg_store, task.id, after=datetime.fromisoformat(task.lease_until))
            statuses.append(client.ack(task, solved=1, n=8, solver="pol@1"))
    assert statuses == ["acked"] * 3  # not "late": the lease never lapsed
