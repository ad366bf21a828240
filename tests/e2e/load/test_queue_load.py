"""10,000 queue tasks, 8 concurrent consumer processes (spawned), real PostgreSQL, store queue
functions (``FOR UPDATE SKIP LOCKED`` lease in batches of 50, batched ack with the lease tokens):
no task delivered twice within a live lease, none lost, every row acked after exactly one delivery.

Reuses :func:`testkit.queue_load.run_arm` (the benchmark's ``store`` arm)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from curriculum.store.db import Store
from curriculum.store.models import QueueItem
from testkit.queue_load import run_arm

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TASKS, CONSUMERS, BATCH = 10_000, 8, 50


def test_ten_thousand_tasks_eight_consumers(pg_store: Store, pg_url: str) -> None:
    res = run_arm("store", pg_url, TASKS, CONSUMERS, BATCH)
    print(f"queue load: {res['tasks_per_s']:.0f} tasks/s over {res['seconds']:.1f} s, "
          f"lease p50 {res['lease_p50_ms']:.1f} ms p99 {res['lease_p99_ms']:.1f} ms")
    with pg_store.session() as s:
        states = dict(s.execute(select(QueueItem.state, func.count()).group_by(QueueItem.state)).all())
        attempts = dict(s.execute(select(QueueItem.attempts, func.count()).group_by(QueueItem.attempts)).all())
    assert res["delivered"] == res["distinct"] == TASKS
    assert res["duplicates"] == 0 and res["lost"] == 0
    assert states == {"acked": TASKS}
    assert attempts == {1: TASKS}
