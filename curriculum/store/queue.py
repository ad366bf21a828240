"""The durable downstream queue: a lease table in the store, scoped by run.

Every operation names the run whose queue it works on: a daemon or API never leases, acks or counts
another run's tasks, even when several runs share one database.

Semantics (at-least-once delivery, exactly-one outcome):

* ``enqueue`` adds one row per task (unique on task id, so emitting a task twice is a no-op); call
  it in the same transaction that marks the task emitted (outbox).
* ``lease(n, lease_s)`` hands out up to ``n`` rows that are ``ready`` or whose lease expired, each
  with a fresh lease token, and counts an attempt. One ``UPDATE … WHERE id IN (SELECT … FOR UPDATE
  SKIP LOCKED) RETURNING`` statement: concurrent consumers never block on or receive each other's
  rows (SQLite serialises writers, so the same statement is atomic there). A row whose lease
  expired after ``max_attempts`` deliveries is dead-lettered by the same statement instead of leased.
* **The lease rule** (ack, nack and renew alike): a lease token is required, and it is valid while
  the row is still ``leased`` under that token. A lease is *live* until ``lease_until``; after that
  anybody may lease the task again, which replaces the token. So an operation with an expired token
  is accepted while nobody else has taken the task (answering ``late`` so the trainer knows it was
  at risk), and refused with ``lease_lost`` once someone has. Acking, nacking and dead-lettering end
  the lease too.
* ``ack`` records the trainer's outcome once; acking an acked task answers ``already_acked`` and
  changes nothing. ``ack_many`` acks a batch in one statement with a status per item.
* ``nack`` returns a leased row to ``ready`` at once (or to ``dead`` once attempts are spent).
* ``renew`` extends the lease to ``now + lease_s``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    String,
    Table,
    and_,
    case,
    cast,
    column,
    func,
    literal,
    or_,
    select,
    update,
    values,
)
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import QueueItem, utcnow


def _as_table(table: object) -> Table:
    assert isinstance(table, Table)
    return table


#: Core table: the hot lease/ack statements skip the ORM's bulk-update bookkeeping (measured faster).
_QUEUE = _as_table(QueueItem.__table__)
_Q = _QUEUE.c
#: Most items one ``ack_many`` call takes (bind parameters stay far below PostgreSQL's limit).
MAX_BATCH = 1000


class AckStatus(StrEnum):
    ACKED = "acked"  # accepted under a live lease
    LATE = "late"  # accepted after lease_until: nobody else had taken the task
    ALREADY_ACKED = "already_acked"
    NOT_FOUND = "not_found"
    LEASE_LOST = "lease_lost"
    NOT_LEASED = "not_leased"

    @property
    def accepted(self) -> bool:
        return self in (AckStatus.ACKED, AckStatus.LATE)


@dataclass(frozen=True)
class Leased:
    """A leased queue row as a consumer sees it."""

    queue_id: int
    task_id: int
    lease_token: str
    lease_until: datetime
    attempts: int
    message: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """A trainer's outcome for one leased task: ``solved`` of ``n`` attempts by ``solver``."""

    task_id: int
    lease_token: str
    solved: int
    n: int
    solver: str


def enqueue(sess: Session, items: Sequence[tuple[int, int | None, str | None, dict[str, Any]]]) -> int:
    """Add ``(task_id, run_id, topic, message)`` rows; tasks already queued are skipped.

    The selectable fields (domain, predicted in-band probability, target solver) are copied from
    the message (see :class:`propel_sdk.schema.FrontierTask`).
    """
    now = utcnow()
    rows = [{"task_id": t, "run_id": r, "topic": topic, "message": msg, "state": "ready", "attempts": 0,
             "enqueued_at": now, **selectable(msg)} for t, r, topic, msg in items]
    return insert_ignore(sess, QueueItem, rows, ["task_id"])


def selectable(message: dict[str, Any]) -> dict[str, Any]:
    """The queue columns a lease may select on, read from a task message."""
    p = message.get("predicted_in_band")
    check = message.get("spot_check")
    solver = message.get("solver") or (check.get("solver") if isinstance(check, dict) else None)
    return {"domain": message.get("domain"), "predicted_in_band": float(p) if isinstance(p, int | float) else None,
            "solver": solver}


def _visible(now: datetime) -> ColumnElement[bool]:
    """Rows a lease may take: ready, or leased with the lease expired."""
    return or_(_Q.state == "ready", and_(_Q.state == "leased", _Q.lease_until < now))


def dead_letter_expired(sess: Session, max_attempts: int, *, run_id: int, now: datetime | None = None) -> int:
    """Move the run's rows whose lease expired after ``max_attempts`` deliveries to ``dead``.

    ``lease`` dead-letters the rows it meets on its own; this sweep settles the rest (for status).
    """
    now = now or utcnow()
    stmt = update(_QUEUE).where(
        _Q.run_id == run_id, _Q.state == "leased", _Q.lease_until < now, _Q.attempts >= max_attempts,
    ).values(state="dead", lease_token=None).returning(_Q.id)
    return len(sess.execute(stmt.execution_options(synchronize_session=False)).all())


def lease(sess: Session, n: int, lease_s: float, consumer: str, max_attempts: int, *, run_id: int,
          now: datetime | None = None, where: Sequence[ColumnElement[bool]] = ()) -> list[Leased]:
    """Lease up to ``n`` visible rows of run ``run_id`` for ``lease_s`` seconds to ``consumer``.

    ``where`` narrows the rows (see :mod:`curriculum.store.selection`). Rows met whose attempts are
    spent are dead-lettered; when that leaves the batch short, the lease is retried for the rest.
    """
    now = now or utcnow()
    got: list[Leased] = []
    while len(got) < n:
        batch, dead = _lease_once(sess, n - len(got), lease_s, consumer, max_attempts, run_id, now, where)
        got += batch
        if not dead:
            break
    return got


def _lease_once(sess: Session, n: int, lease_s: float, consumer: str, max_attempts: int, run_id: int,
                now: datetime, where: Sequence[ColumnElement[bool]]) -> tuple[list[Leased], int]:
    pick = (select(_Q.id).where(_Q.run_id == run_id, _visible(now), *where).order_by(_Q.id).limit(n)
            .with_for_update(skip_locked=True)).scalar_subquery()
    until = now + timedelta(seconds=lease_s)
    spent = _Q.attempts >= max_attempts
    # One statement for the whole batch. Each row's token is a fresh random batch secret plus the
    # row id: unique per row, unguessable, and different from any earlier lease of the same row.
    token = literal(secrets.token_hex(12) + "-") + cast(_Q.id, String)
    stmt = (update(_QUEUE).where(_Q.id.in_(pick))
            .values(state=case((spent, "dead"), else_="leased"),
                    lease_until=case((spent, _Q.lease_until), else_=literal(until, _Q.lease_until.type)),
                    lease_token=case((spent, None), else_=token),
                    consumer=case((spent, _Q.consumer), else_=consumer),
                    attempts=case((spent, _Q.attempts), else_=_Q.attempts + 1))
            .returning(_Q.id, _Q.task_id, _Q.state, _Q.attempts, _Q.message, _Q.lease_token))
    rows = sess.execute(stmt.execution_options(synchronize_session=False)).all()
    leased = [Leased(int(r.id), int(r.task_id), str(r.lease_token), until, int(r.attempts), dict(r.message))
              for r in sorted(rows, key=lambda r: r.id) if r.state == "leased"]
    return leased, len(rows) - len(leased)


def _holds(run_id: int, task_id: Any, token: Any) -> list[ColumnElement[bool]]:
    """The lease rule: the row is leased under ``token`` (live or expired-but-untaken)."""
    return [_Q.run_id == run_id, _Q.task_id == task_id, _Q.state == "leased", _Q.lease_token == token]


def ack(sess: Session, task_id: int, *, run_id: int, lease_token: str, solved: int, n: int, solver: str,
        now: datetime | None = None) -> AckStatus:
    """Record a trainer's outcome for one task (see :func:`ack_many`)."""
    return ack_many(sess, [Outcome(task_id, lease_token, solved, n, solver)], run_id=run_id, now=now)[task_id]


def ack_many(sess: Session, outcomes: Sequence[Outcome], *, run_id: int,
             now: datetime | None = None) -> dict[int, AckStatus]:
    """Record outcomes of leased tasks; a status per task id, at most one recorded outcome per task.

    One ``UPDATE … FROM (VALUES …) RETURNING`` on PostgreSQL (one ``UPDATE`` per item on SQLite,
    which has no round trips to save); only refused items are read again to say why. Task ids
    must be distinct within a call.
    """
    if not outcomes:
        return {}
    if len({o.task_id for o in outcomes}) != len(outcomes):
        raise ValueError("each task may appear once per ack batch")
    now = now or utcnow()
    done: dict[int, datetime | None] = {}
    for chunk in (outcomes[i:i + MAX_BATCH] for i in range(0, len(outcomes), MAX_BATCH)):
        done.update(_ack_chunk(sess, chunk, run_id, now))
    out = {tid: AckStatus.LATE if until is not None and until < now else AckStatus.ACKED for tid, until in done.items()}
    refused = [o.task_id for o in outcomes if o.task_id not in done]
    if refused:
        out.update(_why_refused(sess, refused, run_id))
    return {o.task_id: out[o.task_id] for o in outcomes}


def _ack_chunk(sess: Session, chunk: Sequence[Outcome], run_id: int, now: datetime) -> dict[int, datetime | None]:
    sets = {"state": "acked", "acked_at": now, "lease_token": None}
    if sess.get_bind().dialect.name != "postgresql":
        done: dict[int, datetime | None] = {}
        for o in chunk:
            row = sess.execute(update(_QUEUE).where(*_holds(run_id, o.task_id, o.lease_token)).values(
                **sets, outcome_solved=o.solved, outcome_n=o.n, outcome_solver=o.solver,
            ).returning(_Q.task_id, _Q.lease_until).execution_options(synchronize_session=False)).first()
            if row is not None:
                done[int(row.task_id)] = row.lease_until
        return done
    v = values(column("tid", Integer), column("tok", String), column("solved", Integer), column("n", Integer),
               column("solver", String), name="v").data(
        [(o.task_id, o.lease_token, o.solved, o.n, o.solver) for o in chunk])
    stmt = (update(_QUEUE).where(*_holds(run_id, v.c.tid, v.c.tok))
            .values(**sets, outcome_solved=v.c.solved, outcome_n=v.c.n, outcome_solver=v.c.solver)
            .returning(_Q.task_id, _Q.lease_until))
    return {int(r.task_id): r.lease_until for r in sess.execute(stmt.execution_options(synchronize_session=False))}


def _why_refused(sess: Session, task_ids: Sequence[int], run_id: int) -> dict[int, AckStatus]:
    rows = sess.execute(select(_Q.task_id, _Q.state).where(_Q.run_id == run_id, _Q.task_id.in_(task_ids)))
    states = {int(r.task_id): str(r.state) for r in rows}
    why = {"acked": AckStatus.ALREADY_ACKED, "leased": AckStatus.LEASE_LOST}
    return {t: why.get(states[t], AckStatus.NOT_LEASED) if t in states else AckStatus.NOT_FOUND for t in task_ids}


def nack(sess: Session, task_id: int, *, run_id: int, lease_token: str, max_attempts: int,
         now: datetime | None = None) -> AckStatus:
    """Give a leased task back (``ready``), or dead-letter it when its attempts are spent.

    ``lease_until`` is left as it was (it only means something while ``leased``), so the statement
    can report whether the lease had expired.
    """
    now = now or utcnow()
    row = sess.execute(update(_QUEUE).where(*_holds(run_id, task_id, lease_token)).values(
        state=case((_Q.attempts >= max_attempts, "dead"), else_="ready"), lease_token=None,
    ).returning(_Q.lease_until).execution_options(synchronize_session=False)).first()
    if row is None:
        return _why_refused(sess, [task_id], run_id)[task_id]
    return AckStatus.LATE if row.lease_until is not None and row.lease_until < now else AckStatus.ACKED


def renew(sess: Session, task_id: int, *, run_id: int, lease_token: str, lease_s: float,
          now: datetime | None = None) -> AckStatus:
    """Extend the lease held with ``lease_token`` to ``now + lease_s`` (``late`` if it had expired)."""
    now = now or utcnow()
    until = now + timedelta(seconds=lease_s)
    for status, cond in ((AckStatus.ACKED, _Q.lease_until >= now), (AckStatus.LATE, _Q.lease_until < now)):
        row = sess.execute(update(_QUEUE).where(*_holds(run_id, task_id, lease_token), cond)
                           .values(lease_until=until).returning(_Q.id)
                           .execution_options(synchronize_session=False)).first()
        if row is not None:
            return status
    return _why_refused(sess, [task_id], run_id)[task_id]


def ready_count(sess: Session, run_id: int) -> int:
    """Tasks of the run waiting to be leased (the backpressure measure)."""
    return int(sess.execute(select(func.count()).select_from(_QUEUE)
                            .where(_Q.run_id == run_id, _Q.state == "ready")).scalar_one())
