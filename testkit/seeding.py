"""Seeding a run's queue with small arith tasks, and watching their leases (API tests)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from sqlalchemy import select

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import QueueItem


def seed(store: Store, n: int, run: str = "api", schema_version: int = 1) -> list[int]:
    """``n`` valid arith tasks of run ``run``, each queued ready with a minimal message of
    ``schema_version``; returns their task ids."""
    tag = "" if schema_version == 1 else f"-v{schema_version}"  # distinct content hashes per version
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"h{i}{tag}", f"{i}+{i}", True,
                                         {"answer": 2 * i}) for i in range(n)])
        queue.enqueue(s, [(t, run_id, "add:1", {"id": t, "schema_version": schema_version}) for t in ids])
    return ids


def seed_arith(store: Store, exprs: list[str], run: str = "api") -> list[int]:
    """One queued task per arith expression of run ``run``, its message built as the daemon builds it
    (``solver_prompt``, ``grading`` …); returns their task ids."""
    from curriculum.domains.arith import ArithDomain
    from testkit.messages import frontier_message

    domain = ArithDomain()
    tasks = [domain.check(domain.parse(e).task).task for e in exprs]  # type: ignore[arg-type]
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", t.content_hash, t.text, True, t.payload)
                                         for t in tasks])
        queue.enqueue(s, [(tid, run_id, domain.topic(t), frontier_message(domain, t, tid, domain.topic(t)))
                          for tid, t in zip(ids, tasks, strict=True)])
    return ids


def wait_renewed(store: Store, task_id: int, after: datetime, timeout_s: float = 60) -> datetime:
    """Wait until the queue row of ``task_id`` is leased until later than ``after`` (a client renewed
    it); returns the new ``lease_until``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with store.session() as s:
            until = s.scalars(select(QueueItem.lease_until).where(QueueItem.task_id == task_id)).one()
        if until is not None and (until if until.tzinfo else until.replace(tzinfo=UTC)) > after:
            return until
        time.sleep(0.1)
    raise TimeoutError(f"the lease of task {task_id} was not renewed within {timeout_s} s")
