"""propel_sdk.torch_data.TaskStream against a real API server and store: rows stream, each reported
outcome is acked exactly once (as the trainer's solver at its version), unreported tasks are nacked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient
from propel_sdk.torch_data import TaskStream
from testkit.seeding import seed_arith
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
TOKEN = "t0k3n-for-stream-tests"
EXPRS = [f"{i}+{i + 1}" for i in range(1, 8)]


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store]]:
    ctx = ApiContext(store=store, run_name="stream", token=TOKEN, max_attempts=3)
    with serve_app(create_app(ctx)) as url:
        yield url, store


def _states(store: Store, ids: list[int]) -> dict[int, str]:
    with store.session() as s:
        return dict(s.execute(select(QueueItem.task_id, QueueItem.state).where(QueueItem.task_id.in_(ids))).all())


def test_rows_stream_reports_ack_once_and_close_nacks_the_rest(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed_arith(store, EXPRS, run="stream")
    with PropelClient(url, token=TOKEN) as client:
        stream = TaskStream(client, solver="tiny", version="step-0", batch=3, ack_every=2, lease_s=60,
                            idle_timeout_s=0.0, poll_s=0.05)
        rows = []
        for row in stream:
            rows.append(row)
            if len(rows) == 5:
                break
        assert [r["task_id"] for r in rows] == ids[:5]
        assert rows[0]["prompt"].startswith("Compute: 1+2\n") and rows[0]["domain"] == "arith"
        assert stream.message(ids[0])["grading"]["answer"] == 3
        assert stream.report(ids[0], solved=3, n=8)
        assert not stream.report(ids[0], solved=3, n=8)  # a second report of the same task is ignored
        stream.set_version("step-5")
        assert stream.report(ids[1], solved=1, n=8, errors=1)
        assert stream.report(ids[2], solved=0, n=8)  # pending: ack_every=2 sends it on close
        assert _states(store, ids[:2]) == {ids[0]: "acked", ids[1]: "acked"}
        stream.close()
    assert (stream.acked, stream.nacked, stream.statuses) == (3, 3, {"acked": 3})  # ids[3:6] leased, unreported
    states = _states(store, ids)
    assert [states[i] for i in ids] == ["acked"] * 3 + ["ready"] * 4
    with store.session() as s:
        labels = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k, Label.source)
                           .order_by(Label.task_id)).all()
    assert [tuple(lab) for lab in labels] == [(ids[0], "tiny@step-0", 3, 8, "consumer"),
                                              (ids[1], "tiny@step-5", 1, 8, "consumer"),
                                              (ids[2], "tiny@step-5", 0, 8, "consumer")]


def test_hf_dataset_yields_the_same_rows_and_ends_when_idle(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed_arith(store, EXPRS[:3], run="stream")
    with PropelClient(url, token=TOKEN) as client, TaskStream(client, solver="tiny", batch=2,
                                                              idle_timeout_s=0.2, poll_s=0.05) as stream:
        got = [row["task_id"] for row in stream.hf_dataset()]
        assert got == ids and stream.unreported == 3
    assert stream.nacked == 3 and set(_states(store, ids).values()) == {"ready"}
