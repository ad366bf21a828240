"""AsyncPropelClient against a real API server and PostgreSQL: every operation, the schema check,
lease renewal while a batch is held, and retries through a daemon restart."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from datetime import datetime

import pytest

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.http.api import ApiContext, create_app
from propel_sdk.aio import AsyncPropelClient
from propel_sdk.client import Ack, PropelClientError
from propel_sdk.schema import SchemaVersionError
from testkit.seeding import seed, wait_renewed
from testkit.servers import RestartableServer

pytestmark = pytest.mark.integration
TOKEN = "sdk-async-t0k3n"


@pytest.fixture
def server(pg_store: Store) -> Iterator[RestartableServer]:
    srv = RestartableServer(lambda: create_app(ApiContext(store=pg_store, run_name="sdk-async", token=TOKEN,
                                                          max_attempts=3)))
    srv.start()
    yield srv
    srv.stop()


def test_every_operation(server: RestartableServer, pg_store: Store) -> None:
    ids = seed(pg_store, 4, run="sdk-async")

    async def main() -> None:
        async with AsyncPropelClient(server.url, token=TOKEN) as client:
            got = await client.lease(3, lease_s=60, consumer="async-a")
            assert [t.id for t in got] == ids[:3] and got[0].message["schema_version"] == 1
            assert await client.ack(got[0], solved=2, n=8, solver="pol@1") == "acked"
            assert await client.ack(got[0], solved=2, n=8, solver="pol@1") == "already_acked"
            await client.renew(got[1], lease_s=120)
            assert await client.nack(got[1]) == "returned"
            assert await client.ack_many([Ack(got[2], solved=1, n=8, solver="pol@1"),
                                          Ack(got[0], solved=2, n=8, solver="pol@1")]) == {
                got[2].id: "acked", got[0].id: "already_acked"}
            with pytest.raises(PropelClientError) as err:
                await client.ack(999_999, solved=1, n=8, solver="s", lease_token="t")
            assert err.value.status == 404
            assert (await client.announce("pol", 2, order=2))["version"] == "2"
            assert [v["version"] for v in (await client.solver_versions("pol"))["versions"]][-1] == "2"
            assert (await client.status())["queue"]["acked"] == 2
            exported = [r async for r in client.export(state=["acked"])]
            assert sorted(r["id"] for r in exported) == [ids[0], ids[2]]

    asyncio.run(main())


def test_unknown_schema_version_fails_loudly(server: RestartableServer, pg_store: Store) -> None:
    seed(pg_store, 1, run="sdk-async", schema_version=7)

    async def main() -> None:
        async with AsyncPropelClient(server.url, token=TOKEN) as client:
            with pytest.raises(SchemaVersionError, match="schema_version 7 is newer than this SDK"):
                await client.lease(2, consumer="old")

    asyncio.run(main())
    with pg_store.session() as s:
        assert repo.queue_depths(s) == {"ready": 1}


def test_iterate_renews_a_held_batch_and_drains(server: RestartableServer, pg_store: Store) -> None:
    ids = seed(pg_store, 5, run="sdk-async")

    async def main() -> list[str]:
        statuses = []
        async with AsyncPropelClient(server.url, token=TOKEN) as client:
            async for task in client.iterate(batch=2, lease_s=2, consumer="async-slow"):
                if task.id == ids[1]:
                    await asyncio.to_thread(wait_renewed, pg_store, task.id,
                                            datetime.fromisoformat(task.lease_until))
                statuses.append(await client.ack(task, solved=0, n=4, solver="s"))
        return statuses

    assert asyncio.run(main()) == ["acked"] * 5
    with pg_store.session() as s:
        assert repo.queue_depths(s) == {"acked": 5}


def test_rides_out_a_daemon_restart(server: RestartableServer, pg_store: Store) -> None:
    ids = seed(pg_store, 2, run="sdk-async")
    retried = threading.Event()

    class OnRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            retried.set()

    handler = OnRetry(logging.WARNING)
    logging.getLogger("propel_sdk").addHandler(handler)

    async def main() -> dict[int, str]:
        async with AsyncPropelClient(server.url, token=TOKEN, backoff_s=0.05, max_backoff_s=0.5,
                                     max_retries=100) as client:
            got = await client.lease(2, lease_s=300, consumer="async-t")
            server.stop()
            server.start(when=retried)  # back only after the client retried
            return await client.ack_many([Ack(t, solved=1, n=8, solver="pol@1") for t in got])

    try:
        assert asyncio.run(main()) == {i: "acked" for i in ids}
    finally:
        logging.getLogger("propel_sdk").removeHandler(handler)
    assert retried.is_set()
