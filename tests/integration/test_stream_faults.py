"""TaskStream's trainer-side defects of #37 against a real API server and store (SQLite and PostgreSQL):
each test fails on 703b2a0. A reported task is renewed until its ack is stored; a flush never drops a
batch (a refused item fails alone and is surfaced naming the task, a batch over the API's limit is
split); a 500 is not retried forever; a renew refused with 401 keeps every task and report; the
message of a reported task can still be read; read-ahead tasks are nacked as never tried."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import LeasedTask, PropelClient, PropelClientError
from propel_sdk.torch_data import TaskStream
from testkit.seeding import seed
from testkit.servers import RestartableServer, serve_app
from testkit.waiting import eventually

if TYPE_CHECKING:
    from propel_sdk.ledger import Refusal

pytestmark = pytest.mark.integration
TOKEN = "stream-faults-t0k3n"
RUN = "faults"


def _row(task: LeasedTask) -> dict[str, Any]:
    return {"task_id": task.id}


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store, ApiContext]]:
    ctx = ApiContext(store=store, run_name=RUN, token=TOKEN, max_attempts=5)
    with serve_app(create_app(ctx)) as url:
        yield url, store, ctx


def _queue(store: Store, ids: list[int]) -> dict[int, tuple[str, int]]:
    with store.session() as s:
        rows = s.execute(select(QueueItem.task_id, QueueItem.state, QueueItem.attempts)
                         .where(QueueItem.task_id.in_(ids))).all()
    return {tid: (state, attempts) for tid, state, attempts in rows}


def _labels(store: Store) -> dict[int, tuple[str, int, int]]:
    with store.session() as s:
        rows = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k)
                         .where(Label.source == "consumer")).all()
    return {tid: (sid, solved, k) for tid, sid, solved, k in rows}


def _stream(client: PropelClient, **kw: Any) -> TaskStream:
    args: dict[str, Any] = {"solver": "pol", "version": "step-1", "batch": 8, "ack_every": 1000,
                            "lease_s": 60.0, "idle_timeout_s": 0.0, "poll_s": 0.05, "row": _row}
    return TaskStream(client, **(args | kw))


def _take(stream: TaskStream, n: int) -> list[int]:
    got: list[int] = []
    for row in stream:
        got.append(row["task_id"])
        if len(got) == n:
            break
    return got


def test_a_reported_task_stays_leased_until_its_ack_is_stored(api: tuple[str, Store, ApiContext]) -> None:
    """Defect 1: the outcome waits in the pending batch; its lease must not lapse meanwhile."""
    url, store, _ = api
    seed(store, 2, run=RUN)
    with PropelClient(url, token=TOKEN) as client, PropelClient(url, token=TOKEN) as other:
        stream = _stream(client, lease_s=1.2, batch=2)
        (tid,) = _take(stream, 1)
        assert stream.report(tid, solved=2, n=4)
        first = _lease_until(store, tid)
        assert eventually(lambda: _lease_until(store, tid) > first, timeout_s=10)  # renewed after the report
        assert eventually(lambda: datetime.now(UTC) > first + timedelta(seconds=0.2), timeout_s=10)
        assert other.lease(2, lease_s=60, consumer="other") == []  # past the first lease: still held
        assert stream.flush()
        stream.close()
    assert stream.statuses == {"acked": 1} and not stream.refused
    assert _labels(store)[tid] == ("pol@step-1", 2, 4)


def _lease_until(store: Store, tid: int) -> datetime:
    with store.session() as s:
        until = s.scalars(select(QueueItem.lease_until).where(QueueItem.task_id == tid)).one()
    assert until is not None
    return until if until.tzinfo else until.replace(tzinfo=UTC)


def test_a_bad_report_fails_alone_and_names_its_task(api: tuple[str, Store, ApiContext]) -> None:
    """Defect 2: one ``solved + errors > n`` among good reports; the good ones are stored."""
    url, store, _ = api
    seed(store, 5, run=RUN)
    with PropelClient(url, token=TOKEN) as client:
        stream = _stream(client, batch=5)
        got = _take(stream, 5)
        for i, tid in enumerate(got):
            assert stream.report(tid, solved=3 if i != 2 else 4, n=4, errors=1 if i == 2 else 0)
        assert stream.flush()
        summary = stream.close()
    assert sorted(_labels(store)) == sorted(t for t in got if t != got[2])
    assert [(r.task_id, r.status) for r in summary.refused] == [(got[2], "invalid")]
    assert "cannot exceed n" in summary.refused[0].detail and str(got[2]) in str(summary.refused[0])
    assert summary.unsent == [] and summary.stored == 4


def test_an_unannounced_version_is_refused_and_the_rest_stored(api: tuple[str, Store, ApiContext]) -> None:
    """Defect 2: ``set_version`` to a version string with no step number that was never announced."""
    url, store, _ = api
    ids = seed(store, 6, run=RUN)
    seen: list[Refusal] = []
    with PropelClient(url, token=TOKEN) as client:
        stream = _stream(client, batch=6, on_refused=seen.append)
        got = _take(stream, 6)
        for tid in got[:3]:
            stream.report(tid, solved=1, n=4)
        stream.set_version("nightly-candidate")
        for tid in got[3:]:
            stream.report(tid, solved=1, n=4)
        assert stream.flush()
        refused = stream.take_refused()
        stream.close()
    assert sorted(r.task_id for r in refused) == sorted(got[3:]) and {r.status for r in refused} == {"invalid"}
    assert seen == refused
    assert all("version" in r.detail for r in refused)
    assert sorted(_labels(store)) == sorted(got[:3])
    assert {_queue(store, ids)[t][0] for t in got[3:]} == {"ready"}  # refused, still held: nacked by close


def test_acks_piled_up_over_the_batch_limit_are_split(pg_store: Store) -> None:
    """Defect 2: 1,003 reports during an outage go in two requests once the API is back (it takes 1,000)."""
    server = RestartableServer(lambda: create_app(ApiContext(store=pg_store, run_name=RUN, token=TOKEN)))
    server.start()
    ids = seed(pg_store, 1003, run=RUN)
    try:
        with PropelClient(server.url, token=TOKEN, max_retries=0) as client:
            stream = _stream(client, batch=1000, ack_every=1)
            got = _take(stream, 1003)
            server.stop()
            for tid in got:
                stream.report(tid, solved=1, n=2)  # each report's flush fails: the outcomes pile up
            server.start()
            assert stream.flush()
            stream.close()
    finally:
        server.stop()
    assert {state for state, _ in _queue(pg_store, ids).values()} == {"acked"} and len(_labels(pg_store)) == 1003
    assert stream.acked == 1003 and not stream.refused


def test_a_solver_id_the_store_cannot_hold_is_not_retried_forever(api: tuple[str, Store, ApiContext]) -> None:
    """Defect 3 (SDK half): PostgreSQL answers 500 for a 256-character name plus a version; the SDK
    retries it a bounded number of times, then refuses it (naming the task) instead of keeping the
    batch stuck; on SQLite the same ack is stored. Either way nothing stays pending."""
    url, store, _ = api
    seed(store, 3, run=RUN)
    with PropelClient(url, token=TOKEN, backoff_s=0.01) as client:
        stream = _stream(client, batch=3, solver="p" * 256, version="step-7")
        got = _take(stream, 3)
        for tid in got:
            stream.report(tid, solved=1, n=2)
        assert stream.flush()
        summary = stream.close()
    refused = {r.task_id for r in summary.refused}
    stored = set(_labels(store))
    assert summary.unsent == [] and refused | stored == set(got) and not refused & stored
    assert all(r.status in ("server_error", "invalid") for r in summary.refused)


def test_a_renew_refused_with_401_keeps_tasks_and_reports(api: tuple[str, Store, ApiContext]) -> None:
    """The renewer no longer drops every held task on a non-transient error (a token rotation)."""
    url, store, ctx = api
    ids = seed(store, 4, run=RUN)
    with PropelClient(url, token=TOKEN) as client:
        stream = _stream(client, batch=4, lease_s=0.9)
        got = _take(stream, 2)
        ctx.token = "rotated-t0k3n"
        eventually(lambda: getattr(stream, "renew_error", None) is not None, timeout_s=5)
        assert stream.report(got[0], solved=1, n=2)  # still held: the report is kept
        assert stream.renew_error is not None and stream.renew_error.status == 401
        with pytest.raises(PropelClientError) as err:
            stream.flush()
        assert err.value.status == 401 and len(stream.ledger.pending) == 1  # surfaced, kept
        client.set_token("rotated-t0k3n")
        assert stream.flush()
        summary = stream.close()
    assert set(_labels(store)) == {got[0]} and summary.nacked == 3
    assert {_queue(store, ids)[t][0] for t in ids if t != got[0]} == {"ready"}


def test_message_of_a_reported_task_can_still_be_read(api: tuple[str, Store, ApiContext]) -> None:
    """#36: a second reward function grades after the first one reported."""
    url, store, _ = api
    seed(store, 2, run=RUN)
    with PropelClient(url, token=TOKEN) as client:
        stream = _stream(client, batch=2, ack_every=1)
        (tid,) = _take(stream, 1)
        stream.report(tid, solved=1, n=2)  # ack_every=1: stored at once
        assert stream.message(tid)["id"] == tid
        with pytest.raises(KeyError, match="not leased by this stream"):
            stream.message(10**9)
        stream.close()
    assert stream.acked == 1


def _close_after_one(url: str, store: Store) -> tuple[list[int], int, Any]:
    """Lease 4, hand out 1, close: the ids, the handed-out one, the queue rows, the close summary."""
    ids = seed(store, 4, run=RUN)
    with PropelClient(url, token=TOKEN) as client:
        stream = _stream(client, batch=4)
        (handed,) = _take(stream, 1)
        return ids, handed, stream.close()


def test_close_nacks_read_ahead_as_untried(api: tuple[str, Store, ApiContext]) -> None:
    """#36 item 4: a read-ahead task was never handed to the trainer; the handed-out one was."""
    ids, handed, summary = _close_after_one(api[0], api[1])
    assert (summary.nacked, summary.nacked_untried) == (4, 3)
    queue = _queue(api[1], ids)
    assert {queue[t][0] for t in ids} == {"ready"} and queue[handed][1] == 1


def test_an_untried_nack_costs_no_delivery_attempt(api: tuple[str, Store, ApiContext]) -> None:
    ids, handed, _ = _close_after_one(api[0], api[1])
    queue = _queue(api[1], ids)
    assert [queue[t][1] for t in ids if t != handed] == [0, 0, 0]
