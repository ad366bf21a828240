"""Queue semantics on SQLite and the real PostgreSQL: leases, the one expiry rule shared by ack,
nack and renew, batched acks, and isolation between runs sharing one store."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import QueueItem, utcnow
from curriculum.store.queue import AckStatus, Outcome

pytestmark = pytest.mark.integration


def queued(store: Store, n: int, run: str = "r1", start: int = 0, topic: str = "add:1") -> tuple[int, list[int]]:
    """``n`` tasks queued for run ``run``; returns (run id, task ids)."""
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "cfg", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"{run}-{i}", f"{i}+1", True, {"answer": i + 1},
                                                      topic=topic) for i in range(start, start + n)])
        assert queue.enqueue(s, [(i, run_id, topic, {"id": i}) for i in ids]) == n
        assert queue.enqueue(s, [(ids[0], run_id, topic, {"id": ids[0]})]) == 0
    return run_id, ids


def test_lease_ack_nack_expiry_dead_letter(store: Store) -> None:
    run, ids = queued(store, 5)
    now = utcnow()
    with store.session() as s:
        first = queue.lease(s, 3, 60, "c1", max_attempts=2, run_id=run, now=now)
        second = queue.lease(s, 3, 60, "c2", max_attempts=2, run_id=run, now=now)
    assert [x.task_id for x in first] == ids[:3] and [x.task_id for x in second] == ids[3:]
    with store.session() as s:
        assert queue.lease(s, 3, 60, "c3", max_attempts=2, run_id=run, now=now) == []
        assert queue.ack(s, ids[0], run_id=run, lease_token=first[0].lease_token, solved=2, n=8, solver="t",
                         now=now) == AckStatus.ACKED
        assert queue.ack(s, ids[0], run_id=run, lease_token=first[0].lease_token, solved=5, n=8, solver="t",
                         now=now) == AckStatus.ALREADY_ACKED
        assert queue.nack(s, ids[1], run_id=run, lease_token=first[1].lease_token, max_attempts=2,
                          now=now) == AckStatus.ACKED
    later = now + timedelta(seconds=61)
    with store.session() as s:  # ids[1] was nacked; ids[2..4] leases expired
        again = queue.lease(s, 10, 60, "c4", max_attempts=2, run_id=run, now=later)
    assert sorted(x.task_id for x in again) == ids[1:]
    assert all(x.attempts == 2 for x in again)
    with store.session() as s:  # the first lease's token was replaced: refused
        assert queue.ack(s, ids[2], run_id=run, lease_token=first[2].lease_token, solved=1, n=8, solver="t",
                         now=later) == AckStatus.LEASE_LOST
    with store.session() as s:  # attempts spent + expired → dead letters, nothing leasable
        assert queue.lease(s, 10, 60, "c5", max_attempts=2, run_id=run, now=later + timedelta(seconds=61)) == []
        depths = repo.queue_depths(s, run)
    assert depths == {"acked": 1, "dead": 4}


@pytest.mark.parametrize("op", ["ack", "nack", "renew"])
def test_one_expiry_rule_for_ack_nack_renew(store: Store, op: str) -> None:
    """Live → accepted; expired but untaken → accepted as ``late``; taken by another → ``lease_lost``."""
    run, _ = queued(store, 3)
    t0 = utcnow()

    def call(task_id: int, token: str, now: datetime) -> AckStatus:
        with store.session() as s:
            if op == "ack":
                return queue.ack(s, task_id, run_id=run, lease_token=token, solved=1, n=8, solver="t", now=now)
            if op == "nack":
                return queue.nack(s, task_id, run_id=run, lease_token=token, max_attempts=5, now=now)
            return queue.renew(s, task_id, run_id=run, lease_token=token, lease_s=60, now=now)

    with store.session() as s:
        [live] = queue.lease(s, 1, 100, "a", max_attempts=5, run_id=run, now=t0)
        taken, expired = queue.lease(s, 2, 10, "a", max_attempts=5, run_id=run, now=t0)
    later = t0 + timedelta(seconds=11)
    with store.session() as s:  # after expiry someone else leases the older of the two expired tasks
        [other] = queue.lease(s, 1, 10, "b", max_attempts=5, run_id=run, now=later)
    assert other.task_id == taken.task_id
    assert call(live.task_id, live.lease_token, t0 + timedelta(seconds=5)) == AckStatus.ACKED
    assert call(expired.task_id, expired.lease_token, later) == AckStatus.LATE
    assert call(taken.task_id, taken.lease_token, later) == AckStatus.LEASE_LOST
    assert call(taken.task_id, other.lease_token, later) == AckStatus.ACKED
    assert call(taken.task_id, "forged-" + str(taken.queue_id), later) in (
        AckStatus.ALREADY_ACKED, AckStatus.NOT_LEASED, AckStatus.LEASE_LOST)


def test_ack_many_statuses_idempotent_one_outcome(store: Store) -> None:
    run, ids = queued(store, 5)
    now = utcnow()
    with store.session() as s:
        got = {x.task_id: x for x in queue.lease(s, 4, 60, "c", max_attempts=3, run_id=run, now=now)}
    batch = [Outcome(t, got[t].lease_token, 3, 8, "pol") for t in ids[:3]]
    batch += [Outcome(ids[3], "f" * 30, 1, 8, "pol"), Outcome(ids[4], "x", 1, 8, "pol"),
              Outcome(999_999, "x", 1, 8, "pol")]
    with store.session() as s:
        first = queue.ack_many(s, batch, run_id=run, now=now)
    assert [first[o.task_id] for o in batch] == [AckStatus.ACKED] * 3 + [
        AckStatus.LEASE_LOST, AckStatus.NOT_LEASED, AckStatus.NOT_FOUND]
    with store.session() as s:  # the same batch again (a retried request) changes nothing
        second = queue.ack_many(s, [Outcome(o.task_id, o.lease_token, 0, 1, "other") for o in batch[:3]],
                                run_id=run, now=now)
        rows = {r.task_id: r for r in s.scalars(select(QueueItem).where(
            QueueItem.task_id.in_(ids[:3])))}
    assert set(second.values()) == {AckStatus.ALREADY_ACKED}
    assert {(r.outcome_solved, r.outcome_n, r.outcome_solver) for r in rows.values()} == {(3, 8, "pol")}
    with pytest.raises(ValueError, match="once per ack batch"), store.session() as s:
        queue.ack_many(s, [batch[3], batch[3]], run_id=run)


def test_runs_sharing_a_store_never_see_each_others_tasks(store: Store) -> None:
    run_a, ids_a = queued(store, 4, run="run-a")
    run_b, ids_b = queued(store, 3, run="run-b")
    now = utcnow()
    with store.session() as s:
        assert queue.ready_count(s, run_a) == 4 and queue.ready_count(s, run_b) == 3
        got_b = queue.lease(s, 100, 60, "b", max_attempts=3, run_id=run_b, now=now)
        assert sorted(x.task_id for x in got_b) == ids_b
        # run a's API cannot ack, nack or renew run b's leased task, even with its token
        tok = got_b[0].lease_token
        assert queue.ack(s, ids_b[0], run_id=run_a, lease_token=tok, solved=1, n=8, solver="t") == AckStatus.NOT_FOUND
        assert queue.nack(s, ids_b[0], run_id=run_a, lease_token=tok, max_attempts=3) == AckStatus.NOT_FOUND
        assert queue.renew(s, ids_b[0], run_id=run_a, lease_token=tok, lease_s=60) == AckStatus.NOT_FOUND
        assert queue.ready_count(s, run_a) == 4 and queue.ready_count(s, run_b) == 0
        got_a = queue.lease(s, 100, 60, "a", max_attempts=3, run_id=run_a, now=now)
        assert sorted(x.task_id for x in got_a) == ids_a
        assert repo.queue_depths(s, run_a) == {"leased": 4} and repo.queue_depths(s, run_b) == {"leased": 3}
        assert repo.queue_depths(s) == {"leased": 7}
        far = now + timedelta(hours=1)  # the sweep of one run leaves the other's expired leases alone
        assert queue.dead_letter_expired(s, 1, run_id=run_a, now=far) == 4
        assert repo.queue_depths(s, run_b) == {"leased": 3}
