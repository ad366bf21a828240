"""The durable downstream queue: a lease table in the store.

Semantics (at-least-once delivery, idempotent ack):

* ``enqueue`` adds one row per task (unique on task id, so emitting a task twice is a no-op); call
  it in the same transaction that marks the task emitted (outbox).
* ``lease(n, lease_s)`` hands out up to ``n`` rows that are ``ready`` or whose lease expired, with a
  fresh lease token, and counts an attempt. PostgreSQL uses ``FOR UPDATE SKIP LOCKED`` so
  concurrent consumers never block on or receive each other's rows; SQLite serialises writers,
  so the same single ``UPDATE … RETURNING`` statement is atomic there.
* A row whose lease expired after ``max_attempts`` deliveries is dead-lettered instead of leased.
* ``ack`` records the trainer's outcome once; acking again is a no-op that reports the first ack.
  An ack carrying a lease token that is no longer the row's current lease is refused (the task has
  been redelivered to someone else), unless that other lease has been acked already.
* ``nack`` returns a leased row to ``ready`` at once (or to ``dead`` once attempts are spent).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import String, Table, and_, cast, func, literal, or_, select, update
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import QueueItem, utcnow


def _as_table(table: object) -> Table:
    assert isinstance(table, Table)
    return table


#: Core table: the hot lease/ack statements skip the ORM's bulk-update bookkeeping (measured faster).
_QUEUE = _as_table(QueueItem.__table__)
_Q = _QUEUE.c


class AckStatus(StrEnum):
    ACKED = "acked"
    ALREADY_ACKED = "already_acked"
    NOT_FOUND = "not_found"
    LEASE_LOST = "lease_lost"
    NOT_LEASED = "not_leased"


@dataclass(frozen=True)
class Leased:
    """A leased queue row as a consumer sees it."""

    queue_id: int
    task_id: int
    lease_token: str
    lease_until: datetime
    attempts: int
    message: dict[str, Any]


def enqueue(sess: Session, items: Sequence[tuple[int, int | None, str | None, dict[str, Any]]]) -> int:
    """Add ``(task_id, run_id, topic, message)`` rows; tasks already queued are skipped."""
    now = utcnow()
    rows = [{"task_id": t, "run_id": r, "topic": topic, "message": msg, "state": "ready",
             "attempts": 0, "enqueued_at": now} for t, r, topic, msg in items]
    return insert_ignore(sess, QueueItem, rows, ["task_id"])


def dead_letter_expired(sess: Session, max_attempts: int, now: datetime | None = None) -> int:
    """Move rows whose lease expired after ``max_attempts`` deliveries to ``dead``."""
    now = now or utcnow()
    stmt = update(_QUEUE).where(
        _Q.state == "leased", _Q.lease_until < now, _Q.attempts >= max_attempts,
    ).values(state="dead", lease_token=None).returning(_Q.id)
    return len(sess.execute(stmt.execution_options(synchronize_session=False)).all())


def lease(sess: Session, n: int, lease_s: float, consumer: str, max_attempts: int,
          now: datetime | None = None) -> list[Leased]:
    """Lease up to ``n`` visible rows for ``lease_s`` seconds to ``consumer``."""
    if n < 1:
        return []
    now = now or utcnow()
    dead_letter_expired(sess, max_attempts, now)
    visible = or_(_Q.state == "ready",
                  and_(_Q.state == "leased", _Q.lease_until < now))
    pick = (select(_Q.id).where(visible).order_by(_Q.id).limit(n)
            .with_for_update(skip_locked=True)).scalar_subquery()
    until = now + timedelta(seconds=lease_s)
    # One statement for the whole batch. Each row's token is a fresh random batch secret plus the
    # row id: unique per row, unguessable, and different from any earlier lease of the same row.
    token = literal(secrets.token_hex(12) + "-") + cast(_Q.id, String)
    stmt = (update(_QUEUE).where(_Q.id.in_(pick))
            .values(state="leased", lease_until=until, lease_token=token, consumer=consumer,
                    attempts=_Q.attempts + 1)
            .returning(_Q.id, _Q.task_id, _Q.attempts, _Q.message, _Q.lease_token))
    rows = sess.execute(stmt.execution_options(synchronize_session=False)).all()
    return [Leased(int(r.id), int(r.task_id), str(r.lease_token), until, int(r.attempts), dict(r.message))
            for r in sorted(rows, key=lambda r: r.id)]


def ack(sess: Session, task_id: int, *, solved: int, n: int, solver: str,
        lease_token: str | None = None, now: datetime | None = None) -> AckStatus:
    """Record a trainer's outcome for a task (``solved`` of ``n``); idempotent.

    The common case is one conditional ``UPDATE … RETURNING``; only a refused ack reads the row
    to say why.
    """
    now = now or utcnow()
    cond = [_Q.task_id == task_id, _Q.state == "leased"]
    if lease_token is not None:
        cond.append(_Q.lease_token == lease_token)
    done = sess.execute(update(_QUEUE).where(*cond).values(
        state="acked", acked_at=now, lease_token=None, outcome_solved=solved, outcome_n=n, outcome_solver=solver,
    ).returning(_Q.id).execution_options(synchronize_session=False)).first()
    if done is not None:
        return AckStatus.ACKED
    state = sess.scalars(select(_Q.state).where(_Q.task_id == task_id)).first()
    if state is None:
        return AckStatus.NOT_FOUND
    if state == "acked":
        return AckStatus.ALREADY_ACKED
    return AckStatus.LEASE_LOST if state == "leased" else AckStatus.NOT_LEASED


def _held(sess: Session, task_id: int, lease_token: str | None) -> tuple[QueueItem | None, AckStatus]:
    """The row locked for update when it is leased (under ``lease_token`` if given), else why not."""
    row = sess.scalars(select(QueueItem).where(QueueItem.task_id == task_id).with_for_update()).first()
    if row is None:
        return None, AckStatus.NOT_FOUND
    if row.state == "acked":
        return None, AckStatus.ALREADY_ACKED
    if row.state != "leased":
        return None, AckStatus.NOT_LEASED
    if lease_token is not None and lease_token != row.lease_token:
        return None, AckStatus.LEASE_LOST
    return row, AckStatus.ACKED


def nack(sess: Session, task_id: int, max_attempts: int, lease_token: str | None = None) -> AckStatus:
    """Give a leased task back (``ready``), or dead-letter it when its attempts are spent."""
    row, status = _held(sess, task_id, lease_token)
    if row is not None:
        row.state = "dead" if row.attempts >= max_attempts else "ready"
        row.lease_until, row.lease_token = None, None
    return status


def ready_count(sess: Session) -> int:
    """Tasks waiting to be leased (the backpressure measure)."""
    return int(sess.execute(select(func.count()).select_from(QueueItem)
                            .where(QueueItem.state == "ready")).scalar_one())


def renew(sess: Session, task_id: int, lease_token: str, lease_s: float, now: datetime | None = None) -> AckStatus:
    """Extend a live lease held with ``lease_token`` by ``lease_s`` from ``now``."""
    now = now or utcnow()
    row, status = _held(sess, task_id, lease_token)
    if row is None:
        return status
    if row.lease_until is not None and row.lease_until < now:
        return AckStatus.LEASE_LOST
    row.lease_until = now + timedelta(seconds=lease_s)
    return AckStatus.ACKED
