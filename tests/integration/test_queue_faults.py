"""The queue under the trainer path's faults (#37), on SQLite and the real PostgreSQL: an old token
after the new holder acked, concurrent renews with one token, a solver id over the stored limit, the
outcome's ``errors`` through export, an untried nack, and concurrent version registrations."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import select

from curriculum.store import queue, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, utcnow
from curriculum.store.queue import AckStatus, Outcome
from curriculum.store.transfer import ExportFilter, export_rows
from tests.integration.test_queue import queued

pytestmark = pytest.mark.integration


def test_old_token_after_the_new_holder_acked_is_lease_lost(store: Store) -> None:
    """(#37.8) Only the token that acked gets ``already_acked``; the one whose lease was taken over
    is told its outcome was not stored, for ack, nack and renew alike."""
    run, [tid] = queued(store, 1)
    t0 = utcnow()
    with store.session() as s:
        [old] = queue.lease(s, 1, 10, "a", max_attempts=5, run_id=run, now=t0)
    later = t0 + timedelta(seconds=11)
    with store.session() as s:
        [new] = queue.lease(s, 1, 60, "b", max_attempts=5, run_id=run, now=later)
        assert queue.ack(s, tid, run_id=run, lease_token=new.lease_token, solved=3, n=8, solver="b",
                         now=later) == AckStatus.ACKED
    with store.session() as s:
        assert queue.ack(s, tid, run_id=run, lease_token=old.lease_token, solved=1, n=8, solver="a",
                         now=later) == AckStatus.LEASE_LOST
        assert queue.nack(s, tid, run_id=run, lease_token=old.lease_token, max_attempts=5) == AckStatus.LEASE_LOST
        assert queue.renew(s, tid, run_id=run, lease_token=old.lease_token, lease_s=60) == AckStatus.LEASE_LOST
        assert queue.ack(s, tid, run_id=run, lease_token=new.lease_token, solved=0, n=8, solver="b",
                         now=later) == AckStatus.ALREADY_ACKED  # the acking token's retry stays idempotent
        row = s.scalars(select(QueueItem).where(QueueItem.task_id == tid)).one()
    assert (row.state, row.outcome_solved, row.outcome_solver) == ("acked", 3, "b")


def test_a_solver_id_over_the_stored_limit_is_refused_alone(store: Store) -> None:
    """(#37.3) ``name@version`` longer than the column: ``invalid`` for that item on both stores, the
    rest of the batch stored (PostgreSQL used to fail the whole statement, SQLite stored it)."""
    run, ids = queued(store, 3)
    long_id = "n" * 200 + "@" + "v" * 100
    with store.session() as s:
        got = {x.task_id: x for x in queue.lease(s, 3, 60, "c", max_attempts=5, run_id=run)}
    batch = [Outcome(t, got[t].lease_token, 1, 8, long_id if t == ids[1] else "pol@1") for t in ids]
    with store.session() as s:
        statuses = queue.ack_many(s, batch, run_id=run)
    assert [statuses[t] for t in ids] == [AckStatus.ACKED, AckStatus.INVALID, AckStatus.ACKED]
    with store.session() as s:
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state)).all())
    assert states == {ids[0]: "acked", ids[1]: "leased", ids[2]: "acked"}


def test_the_solver_id_limit_is_the_stored_columns() -> None:
    for col in (QueueItem.__table__.c.outcome_solver, Label.__table__.c.solver_id):
        assert col.type.length == solver_versions.SOLVER_ID_MAX
    assert solver_versions.solver_id_problem("n" * 200, "v" * 55) is None
    assert "301 characters" in (solver_versions.solver_id_problem("n" * 200, "v" * 100) or "")


def test_export_keeps_errors(store: Store) -> None:
    """(#37.10) 0 of 8 with 8 infrastructure errors is not 0 of 8 failures."""
    run, ids = queued(store, 2)
    with store.session() as s:
        got = queue.lease(s, 2, 60, "c", max_attempts=5, run_id=run)
        statuses = queue.ack_many(s, [Outcome(got[0].task_id, got[0].lease_token, 0, 8, "pol@1", errors=8),
                                      Outcome(got[1].task_id, got[1].lease_token, 2, 8, "pol@1")], run_id=run)
    assert set(statuses.values()) == {AckStatus.ACKED}
    with store.session() as s:
        rows = {r["id"]: r for r in export_rows(s, run, ExportFilter())}
    assert rows[ids[0]]["queue"]["outcome"] == {"solved": 0, "n": 8, "errors": 8, "solver": "pol@1"}
    assert rows[ids[1]]["queue"]["outcome"]["errors"] == 0
    assert queue.OUTCOME_KEY not in rows[ids[0]]  # the record is still a message import accepts


def test_an_untried_nack_gives_the_delivery_attempt_back(store: Store) -> None:
    """(#36.4) ``tried=False``: attempts − 1 (floor 0), so read-ahead never dead-letters a task."""
    run, [tid] = queued(store, 1)
    for _ in range(5):  # five untried round trips with max_attempts=2: never dead
        with store.session() as s:
            [x] = queue.lease(s, 1, 60, "c", max_attempts=2, run_id=run)
            assert x.attempts == 1
            assert queue.nack(s, tid, run_id=run, lease_token=x.lease_token, max_attempts=2,
                              tried=False) == AckStatus.ACKED
    with store.session() as s:
        [x] = queue.lease(s, 1, 60, "c", max_attempts=2, run_id=run)
        assert queue.nack(s, tid, run_id=run, lease_token=x.lease_token, max_attempts=2) == AckStatus.ACKED
        [x] = queue.lease(s, 1, 60, "c", max_attempts=2, run_id=run)
        assert x.attempts == 2  # a tried nack costs its attempt
        assert queue.nack(s, tid, run_id=run, lease_token=x.lease_token, max_attempts=2) == AckStatus.ACKED
        assert s.scalars(select(QueueItem.state).where(QueueItem.task_id == tid)).one() == "dead"
        s.execute(QueueItem.__table__.update().values(state="leased", attempts=0, lease_token="t0"))
        assert queue.nack(s, tid, run_id=run, lease_token="t0", max_attempts=2, tried=False) == AckStatus.ACKED
        assert s.scalars(select(QueueItem.attempts).where(QueueItem.task_id == tid)).one() == 0  # floor 0


def test_concurrent_renews_with_one_token_never_answer_lease_lost(pg_store: Store) -> None:
    """(#37.9) Real concurrency on PostgreSQL: pairs of renews with the same token of an expired
    (untaken) lease, started together. Both must be accepted; one of them used to miss."""
    store = pg_store
    rounds = 30
    run, _ = queued(store, rounds)
    t0 = utcnow()
    with store.session() as s:
        held = queue.lease(s, rounds, 1, "c", max_attempts=5, run_id=run, now=t0)
    barrier = threading.Barrier(2)

    def renew(x: queue.Leased) -> AckStatus:
        barrier.wait(timeout=10)
        with store.autocommit() as s:  # as the API runs it
            return queue.renew(s, x.task_id, run_id=run, lease_token=x.lease_token, lease_s=60,
                               now=t0 + timedelta(seconds=5))

    answers: list[AckStatus] = []
    with ThreadPoolExecutor(2) as pool:
        for x in held:
            answers += list(pool.map(renew, [x, x]))
    assert AckStatus.LEASE_LOST not in answers
    assert set(answers) <= {AckStatus.ACKED, AckStatus.LATE} and AckStatus.LATE in answers


def test_concurrent_first_registrations_with_different_orders(pg_store: Store) -> None:
    """One wins; the other gets a clear VersionError naming both orders instead of silently taking
    the winner's order."""
    store = pg_store
    with store.session() as first:
        solver_versions.ensure_registered(first, "pol", "v1.2.10", 5, source="ack")
        with ThreadPoolExecutor(1) as pool:  # the second waits on the first's uncommitted row
            second = pool.submit(_register, store, "pol", "v1.2.10", 7)
            with pytest.raises(TimeoutError):
                second.result(timeout=0.5)
            first.commit()
            err = second.result(timeout=30)
    assert isinstance(err, solver_versions.VersionError)
    assert "order 5" in str(err) and "order 7 contradicts" in str(err)
    with store.session() as s:
        assert [(v.version, v.order) for v in solver_versions.versions(s, "pol")] == [("v1.2.10", 5)]


def _register(store: Store, name: str, version: str, order: int) -> Exception | None:
    try:
        with store.session() as s:
            solver_versions.ensure_registered(s, name, version, order, source="ack")
    except solver_versions.VersionError as err:
        return err
    return None
