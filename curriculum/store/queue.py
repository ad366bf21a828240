"""The durable downstream queue: a lease table in the store, scoped by run.

Every operation names the run whose queue it works on: a daemon or API never leases, acks or counts
another run's tasks, even when several runs share one database.

Semantics (at-least-once delivery, exactly-one outcome):

* ``enqueue`` adds one row per task and run (unique, so emitting a task twice is a no-op); call
  it in the same transaction that marks the task emitted (outbox).
* ``lease(n, lease_s)`` hands out up to ``n`` rows that are ``ready`` or whose lease expired, each
  with a fresh lease token, and counts an attempt. One ``UPDATE … WHERE id IN (SELECT … FOR UPDATE
  SKIP LOCKED) RETURNING`` statement, oldest enqueued first: concurrent consumers never block on or receive each other's
  rows (SQLite serialises writers, so the same statement is atomic there). A row whose lease
  expired after ``max_attempts`` deliveries is dead-lettered by the same statement instead of leased.
* **The lease rule** (ack, nack and renew alike): a lease token is required, and it is valid while
  the row is still ``leased`` under that token. A lease is *live* until ``lease_until``; after that
  anybody may lease the task again, which replaces the token. So an operation with an expired token
  is accepted while nobody else has taken the task (answering ``late`` so the trainer knows it was
  at risk), and refused with ``lease_lost`` once someone has. Acking, nacking and dead-lettering end
  the lease too.
* ``ack`` records the trainer's outcome once (the row keeps the token that acked it); acking an acked
  task again with that token answers ``already_acked`` and changes nothing (an idempotent retry),
  with any other token ``lease_lost`` (the outcome was *not* stored). ``ack_many`` acks a batch in one
  statement with a status per item; an item the store cannot take (a solver id longer than
  :data:`~curriculum.store.solver_versions.SOLVER_ID_MAX`) is ``invalid`` on its own.
* ``nack`` returns a leased row to ``ready`` at once (or to ``dead`` once attempts are spent);
  ``tried=False`` (the task was never tried) also gives the delivery attempt back.
* ``renew`` extends the lease to ``now + lease_s`` in one conditional statement.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache, cached_property
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Executable,
    Float,
    Integer,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import QueueItem, utcnow
from curriculum.store.solver_versions import SOLVER_ID_MAX


def _as_table(table: object) -> Table:
    assert isinstance(table, Table)
    return table


#: Core table: the hot lease/ack statements skip the ORM's bulk-update bookkeeping (measured faster).
_QUEUE = _as_table(QueueItem.__table__)
_Q = _QUEUE.c
#: Most items one ``ack_many`` call takes (bind parameters stay far below PostgreSQL's limit).
MAX_BATCH = 1000
#: Key of the stored message of an acked row that holds what the outcome columns cannot (``errors``,
#: written only when non-zero); export moves it into the record's ``queue.outcome`` (no schema
#: change: ``message`` is JSON).
OUTCOME_KEY = "_outcome"


class AckStatus(StrEnum):
    ACKED = "acked"  # accepted under a live lease
    LATE = "late"  # accepted after lease_until: nobody else had taken the task
    ALREADY_ACKED = "already_acked"
    NOT_FOUND = "not_found"
    LEASE_LOST = "lease_lost"
    NOT_LEASED = "not_leased"
    INVALID = "invalid"  # an outcome the store cannot take (e.g. a solver id over SOLVER_ID_MAX)

    @property
    def accepted(self) -> bool:
        return self in (AckStatus.ACKED, AckStatus.LATE)


@dataclass(frozen=True)
class Leased:
    """A leased queue row as a consumer sees it; ``message_json`` is the message as stored (the API
    sends it on without parsing it)."""

    queue_id: int
    task_id: int
    lease_token: str
    lease_until: datetime
    attempts: int
    message_json: str

    @cached_property
    def message(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.message_json)
        return value


@dataclass(frozen=True)
class Outcome:
    """A trainer's outcome for one leased task: ``solved`` of ``n`` attempts by ``solver``."""

    task_id: int
    lease_token: str
    solved: int
    n: int
    solver: str
    errors: int = 0  # attempts lost to infrastructure failures (kept with the outcome, exported)


def enqueue(sess: Session, items: Sequence[tuple[int, int | None, str | None, dict[str, Any]]]) -> int:
    """Add ``(task_id, run_id, topic, message)`` rows; tasks already queued are skipped.

    The selectable fields (domain, predicted in-band probability, target solver) are copied from
    the message (see :class:`propel_sdk.schema.FrontierTask`).
    """
    now = utcnow()
    rows = [{"task_id": t, "run_id": r, "topic": topic, "message": msg, "state": "ready", "attempts": 0,
             "enqueued_at": now, **selectable(msg)} for t, r, topic, msg in items]
    return insert_ignore(sess, QueueItem, rows, ["run_id", "task_id"])


def selectable(message: dict[str, Any]) -> dict[str, Any]:
    """The queue columns a lease may select on, read from a task message."""
    p = message.get("predicted_in_band")
    check = message.get("spot_check")
    solver = message.get("solver") or (check.get("solver") if isinstance(check, dict) else None)
    return {"domain": message.get("domain"), "predicted_in_band": float(p) if isinstance(p, int | float) else None,
            "solver": solver, "explore": True if message.get("explore") else None}


def _visible(now: Any) -> ColumnElement[bool]:
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


@dataclass(frozen=True)
class Match:
    """Which of a run's visible rows a lease may take; a ``None`` field matches anything."""

    domains: tuple[str, ...] | None = None
    topics: tuple[str, ...] | None = None
    min_predicted: float | None = None
    max_predicted: float | None = None
    solver: str | None = None

    def shape(self) -> tuple[bool, ...]:
        return tuple(getattr(self, f) is not None for f in _MATCH_FIELDS)


_MATCH_FIELDS = ("domains", "topics", "min_predicted", "max_predicted", "solver")
ANY = Match()


def lease(sess: Session, n: int, lease_s: float, consumer: str, max_attempts: int, *, run_id: int,
          now: datetime | None = None, match: Match = ANY) -> list[Leased]:
    """Lease up to ``n`` visible rows of run ``run_id`` that ``match`` for ``lease_s`` seconds to
    ``consumer``. Rows met whose attempts are spent are dead-lettered; when that leaves the batch
    short, the lease is retried for the rest.
    """
    now = now or utcnow()
    got: list[Leased] = []
    params = {"b_run": run_id, "b_now": now, "b_max": max_attempts, "b_consumer": consumer,
              "b_until": now + timedelta(seconds=lease_s),
              **{f"b_{f}": getattr(match, f) for f in _MATCH_FIELDS if getattr(match, f) is not None}}
    stmt = _lease_statement(match.shape())
    while len(got) < n:
        # Each row's token is a fresh random batch secret plus the row id: unique per row,
        # unguessable, and different from any earlier lease of the same row.
        rows = sess.execute(stmt, {**params, "b_n": n - len(got), "b_secret": secrets.token_hex(12) + "-"}).all()
        batch = [Leased(int(r.id), int(r.task_id), str(r.lease_token), params["b_until"], int(r.attempts),
                        r.message) for r in sorted(rows, key=lambda r: r.id) if r.state == "leased"]
        got += batch
        if len(batch) == len(rows):  # nothing was dead-lettered: the run has no more visible rows
            break
    return got


@cache
def _lease_statement(shape: tuple[bool, ...]) -> Executable:
    """The lease ``UPDATE`` for a :class:`Match` shape: built and compiled once, values bound."""
    on = dict(zip(_MATCH_FIELDS, shape, strict=True))
    conds: list[ColumnElement[bool]] = []
    if on["domains"]:
        conds.append(_Q.domain.in_(bindparam("b_domains", expanding=True)))
    if on["topics"]:
        conds.append(_Q.topic.in_(bindparam("b_topics", expanding=True)))
    if on["min_predicted"]:
        conds.append(_Q.predicted_in_band >= bindparam("b_min_predicted", type_=Float))
    if on["max_predicted"]:
        conds.append(_Q.predicted_in_band <= bindparam("b_max_predicted", type_=Float))
    if on["solver"]:
        conds.append(_Q.solver == bindparam("b_solver", type_=String))
    now = bindparam("b_now", type_=_Q.lease_until.type)
    # Enqueue order. Not "ORDER BY id": the primary key gives that order too, and with stale statistics
    # (a queue drained faster than autovacuum analyses it) PostgreSQL walks the primary key over every
    # acked row; only the partial ix_queue_open_run* indexes give (enqueued_at, id) order.
    pick = (select(_Q.id).where(_Q.run_id == bindparam("b_run"), _visible(now), *conds)
            .order_by(_Q.enqueued_at, _Q.id).limit(bindparam("b_n", type_=Integer))
            .with_for_update(skip_locked=True)).scalar_subquery()
    spent = _Q.attempts >= bindparam("b_max", type_=Integer)
    token = bindparam("b_secret", type_=String) + cast(_Q.id, String)
    return (update(_QUEUE).where(_Q.id.in_(pick))
            .values(state=case((spent, "dead"), else_="leased"),
                    lease_until=case((spent, _Q.lease_until), else_=bindparam("b_until", type_=_Q.lease_until.type)),
                    lease_token=case((spent, None), else_=token),
                    consumer=case((spent, _Q.consumer), else_=bindparam("b_consumer", type_=String)),
                    attempts=case((spent, _Q.attempts), else_=_Q.attempts + 1))
            .returning(_Q.id, _Q.task_id, _Q.state, _Q.attempts, cast(_Q.message, Text).label("message"),
                       _Q.lease_token)
            .execution_options(synchronize_session=False))


def _holds(run_id: Any, task_id: Any, token: Any) -> list[ColumnElement[bool]]:
    """The lease rule: the row is leased under ``token`` (live or expired-but-untaken)."""
    return [_Q.run_id == run_id, _Q.task_id == task_id, _Q.state == "leased", _Q.lease_token == token]


def ack(sess: Session, task_id: int, *, run_id: int, lease_token: str, solved: int, n: int, solver: str,
        errors: int = 0, now: datetime | None = None) -> AckStatus:
    """Record a trainer's outcome for one task (see :func:`ack_many`)."""
    return ack_many(sess, [Outcome(task_id, lease_token, solved, n, solver, errors)], run_id=run_id, now=now)[task_id]


def ack_many(sess: Session, outcomes: Sequence[Outcome], *, run_id: int,
             now: datetime | None = None) -> dict[int, AckStatus]:
    """Record outcomes of leased tasks; a status per task id, at most one recorded outcome per task.

    One ``UPDATE … FROM unnest(…) RETURNING`` on PostgreSQL (one ``UPDATE`` per item on SQLite,
    which has no round trips to save); only refused items are read again to say why. An item whose
    solver id is longer than the stored column is ``invalid`` (never sent: PostgreSQL would fail the
    whole statement where SQLite stores it). Task ids must be distinct within a call.
    """
    if not outcomes:
        return {}
    if len({o.task_id for o in outcomes}) != len(outcomes):
        raise ValueError("each task may appear once per ack batch")
    now = now or utcnow()
    good = [o for o in outcomes if len(o.solver) <= SOLVER_ID_MAX]
    done: dict[int, datetime | None] = {}
    for chunk in (good[i:i + MAX_BATCH] for i in range(0, len(good), MAX_BATCH)):
        done.update(_ack_chunk(sess, chunk, run_id, now))
    out = {tid: AckStatus.LATE if until is not None and until < now else AckStatus.ACKED for tid, until in done.items()}
    out.update({o.task_id: AckStatus.INVALID for o in outcomes if len(o.solver) > SOLVER_ID_MAX})
    refused = {o.task_id: o.lease_token for o in outcomes if o.task_id not in out}
    if refused:
        out.update(_why_refused(sess, refused, run_id))
    return {o.task_id: out[o.task_id] for o in outcomes}


def _ack_chunk(sess: Session, chunk: Sequence[Outcome], run_id: int, now: datetime) -> dict[int, datetime | None]:
    """Ack the rows leased under each item's token; the token stays on the acked row, so a repeated
    ack with it is told ``already_acked`` and any other token ``lease_lost``."""
    if sess.get_bind().dialect.name != "postgresql":
        done: dict[int, datetime | None] = {}
        for o in chunk:
            extra = {"message": func.json_set(_Q.message, f"$.{OUTCOME_KEY}", func.json_object("errors", o.errors))
                     } if o.errors else {}
            row = sess.execute(update(_QUEUE).where(*_holds(run_id, o.task_id, o.lease_token)).values(
                state="acked", acked_at=now, outcome_solved=o.solved, outcome_n=o.n, outcome_solver=o.solver,
                **extra,
            ).returning(_Q.task_id, _Q.lease_until).execution_options(synchronize_session=False)).first()
            if row is not None:
                done[int(row.task_id)] = row.lease_until
        return done
    stmt = _pg_ack_statement()
    params = {"tids": [o.task_id for o in chunk], "toks": [o.lease_token for o in chunk],
              "solved": [o.solved for o in chunk], "ns": [o.n for o in chunk], "solvers": [o.solver for o in chunk],
              "errs": [o.errors for o in chunk], "b_run": run_id, "b_now": now}
    return {int(r.task_id): r.lease_until for r in sess.execute(stmt, params)}


@cache
def _pg_ack_statement() -> Executable:
    """``UPDATE queue … FROM unnest(:tids, :toks, …)``: one statement per batch, and the same SQL for
    every batch size (compiled once, prepared by psycopg), unlike a ``VALUES`` list."""
    v = func.unnest(bindparam("tids", type_=ARRAY(Integer)), bindparam("toks", type_=ARRAY(String)),
                    bindparam("solved", type_=ARRAY(Integer)), bindparam("ns", type_=ARRAY(Integer)),
                    bindparam("solvers", type_=ARRAY(String)), bindparam("errs", type_=ARRAY(Integer))).table_valued(
        "tid", "tok", "solved", "n", "solver", "errors").render_derived(name="v")
    # Only an outcome with errors rewrites the message (measured: the JSON round trip on every ack
    # cost about a third of the store's ack throughput); no key means 0 errors.
    extra = func.jsonb_build_object(OUTCOME_KEY, func.jsonb_build_object("errors", v.c.errors))
    message = case((v.c.errors > 0, cast(cast(_Q.message, JSONB).op("||")(extra), JSON)), else_=_Q.message)
    return (update(_QUEUE).where(*_holds(bindparam("b_run"), v.c.tid, v.c.tok))
            .values(state="acked", acked_at=bindparam("b_now", type_=_Q.acked_at.type), message=message,
                    outcome_solved=v.c.solved, outcome_n=v.c.n, outcome_solver=v.c.solver)
            .returning(_Q.task_id, _Q.lease_until).execution_options(synchronize_session=False))


def _why_refused(sess: Session, tokens: dict[int, str], run_id: int) -> dict[int, AckStatus]:
    """Why the rows of ``tokens`` (task id → the caller's token) were not leased under those tokens."""
    rows = sess.execute(select(_Q.task_id, _Q.state, _Q.lease_token)
                        .where(_Q.run_id == run_id, _Q.task_id.in_(list(tokens))))
    found = {int(r.task_id): (str(r.state), r.lease_token) for r in rows}
    return {t: _refusal(*found[t], tok) if t in found else AckStatus.NOT_FOUND for t, tok in tokens.items()}


def _refusal(state: str, held: str | None, token: str) -> AckStatus:
    if state == "acked":  # acked under `held` (None: acked before acked rows kept their token)
        return AckStatus.ALREADY_ACKED if held is None or held == token else AckStatus.LEASE_LOST
    return AckStatus.LEASE_LOST if state == "leased" else AckStatus.NOT_LEASED


def nack(sess: Session, task_id: int, *, run_id: int, lease_token: str, max_attempts: int, tried: bool = True,
         now: datetime | None = None) -> AckStatus:
    """Give a leased task back (``ready``), or dead-letter it when its attempts are spent.

    ``tried=False`` says the consumer never tried the task (read ahead, never handed to its
    trainer): the delivery attempt its lease counted is given back (attempts − 1, floor 0), so it
    can never be dead-lettered by this nack. ``lease_until`` is left as it was (it only means
    something while ``leased``), so the statement can report whether the lease had expired.
    """
    now = now or utcnow()
    attempts = _Q.attempts if tried else case((_Q.attempts > 0, _Q.attempts - 1), else_=0)
    row = sess.execute(update(_QUEUE).where(*_holds(run_id, task_id, lease_token)).values(
        state=case((attempts >= max_attempts, "dead"), else_="ready"), lease_token=None, attempts=attempts,
    ).returning(_Q.lease_until).execution_options(synchronize_session=False)).first()
    if row is None:
        return _why_refused(sess, {task_id: lease_token}, run_id)[task_id]
    return AckStatus.LATE if row.lease_until is not None and row.lease_until < now else AckStatus.ACKED


def renew(sess: Session, task_id: int, *, run_id: int, lease_token: str, lease_s: float,
          now: datetime | None = None) -> AckStatus:
    """Extend the lease held with ``lease_token`` to ``now + lease_s`` (``late`` if it had expired).

    One conditional ``UPDATE``: two concurrent renews with the same token both succeed (two
    statements, "live?" then "expired?", let one renew make the other's second statement miss and
    answer ``lease_lost``). ``RETURNING`` shows only the new row, so a late renew writes the new
    expiry plus one microsecond, and the answer tells the two apart by the value written.
    """
    now = now or utcnow()
    until = now + timedelta(seconds=lease_s)
    marked = until + timedelta(microseconds=1)
    row = sess.execute(update(_QUEUE).where(*_holds(run_id, task_id, lease_token))
                       .values(lease_until=case((_Q.lease_until < now, literal(marked, _Q.lease_until.type)),
                                                else_=literal(until, _Q.lease_until.type)))
                       .returning(_Q.lease_until).execution_options(synchronize_session=False)).first()
    if row is None:
        return _why_refused(sess, {task_id: lease_token}, run_id)[task_id]
    return AckStatus.LATE if row.lease_until == marked else AckStatus.ACKED


def ready_count(sess: Session, run_id: int) -> int:
    """Tasks of the run waiting to be leased (the backpressure measure)."""
    return int(sess.execute(select(func.count()).select_from(_QUEUE)
                            .where(_Q.run_id == run_id, _Q.state == "ready")).scalar_one())


#: Queue states a task leaves for good; :func:`serve_again` brings such a task back.
SETTLED = ("acked", "dead", "stale")


def serve_again(sess: Session, run_id: int, task_ids: Sequence[int], mark: dict[str, Any]) -> list[int]:
    """Serve settled tasks of the run again (``ready``, attempts 0, their place in the enqueue order kept,
    so they go out before newer rows), their message updated with ``mark`` (e.g. ``{"remeasure": true}``:
    drift of a followed trainer is measured by its own acks of tasks it already acked). The ids served again;
    a task not queued in the run, or still open, is left alone."""
    rows = sess.scalars(select(QueueItem).where(QueueItem.run_id == run_id, QueueItem.task_id.in_(list(task_ids)),
                                                QueueItem.state.in_(SETTLED))).all()
    for row in rows:
        row.message = {**dict(row.message), **mark}
        row.explore = selectable(row.message)["explore"]  # a mark may end an unfiltered draw (a replay)
        row.state, row.attempts, row.lease_token, row.lease_until, row.consumer = "ready", 0, None, None, None
    sess.flush()
    return sorted(row.task_id for row in rows)
