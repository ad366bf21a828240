"""Tasks into and out of a run's queue: import (already validated records, one transaction) and
export (a filtered stream of queue rows with their messages and outcomes).

The record format (a frontier-task message plus the generator ``text``) is validated by the
caller against :class:`propel_sdk.schema.TaskRecord`; this module only stores and reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.store import queue, repo
from curriculum.store.models import QueueItem, TaskRow


@dataclass(frozen=True)
class ImportItem:
    """One validated record: the task row to store and the message to queue (its ``id`` is replaced)."""

    task: repo.NewTask
    message: dict[str, Any]


@dataclass(frozen=True)
class ImportResult:
    queued: int  # new queue rows in the run
    already_queued: int  # tasks (by domain + content hash) the run's queue held already


def import_tasks(sess: Session, run_id: int, items: Sequence[ImportItem]) -> ImportResult:
    """Store the tasks (deduplicated by domain + content hash) and queue each once for the run.

    Call it inside one transaction: either every record is imported or none.
    """
    ids = repo.add_tasks(sess, run_id, [it.task for it in items])
    rows = [(tid, run_id, it.task.topic, {**it.message, "id": tid}) for tid, it in zip(ids, items, strict=True)]
    queued = queue.enqueue(sess, rows)
    return ImportResult(queued=queued, already_queued=len(items) - queued)


@dataclass(frozen=True)
class ExportFilter:
    """Which queue rows of a run to export; empty fields match everything."""

    states: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    since: datetime | None = None  # enqueued at or after
    until: datetime | None = None  # enqueued before
    limit: int | None = None


def export_rows(sess: Session, run_id: int, flt: ExportFilter, chunk: int = 1000) -> Iterator[dict[str, Any]]:
    """The run's queue rows in enqueue order, each as ``{**message, "text", "queue": {...}}``
    (a record :func:`import_tasks` accepts again, plus the queue state and the trainer's outcome:
    ``solved`` of ``n`` attempts, ``errors`` of them lost to infrastructure — 0 as well for an
    outcome acked before errors were kept — and the solver id)."""
    q = (select(QueueItem, TaskRow.text).join(TaskRow, TaskRow.id == QueueItem.task_id)
         .where(QueueItem.run_id == run_id).order_by(QueueItem.enqueued_at, QueueItem.id))
    if flt.states:
        q = q.where(QueueItem.state.in_(flt.states))
    if flt.topics:
        q = q.where(QueueItem.topic.in_(flt.topics))
    if flt.domains:
        q = q.where(QueueItem.domain.in_(flt.domains))
    if flt.since is not None:
        q = q.where(QueueItem.enqueued_at >= flt.since)
    if flt.until is not None:
        q = q.where(QueueItem.enqueued_at < flt.until)
    if flt.limit is not None:
        q = q.limit(flt.limit)
    for item, text in sess.execute(q.execution_options(yield_per=chunk)):
        message = dict(item.message)
        extra = message.pop(queue.OUTCOME_KEY, None) or {}
        outcome = None if item.outcome_n is None else {
            "solved": item.outcome_solved, "n": item.outcome_n, "errors": int(extra.get("errors", 0)),
            "solver": item.outcome_solver}
        yield {**message, "text": text, "queue": {
            "state": item.state, "attempts": item.attempts, "enqueued_at": item.enqueued_at.isoformat(),
            "acked_at": item.acked_at.isoformat() if item.acked_at else None, "outcome": outcome}}
