"""Seeding a run's queue with small arith tasks (API tests)."""

from __future__ import annotations

from curriculum.store import queue, repo
from curriculum.store.db import Store


def seed(store: Store, n: int, run: str = "api") -> list[int]:
    """``n`` valid arith tasks of run ``run``, each queued ready; returns their task ids."""
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"h{i}", f"{i}+{i}", True, {"answer": 2 * i})
                                         for i in range(n)])
        queue.enqueue(s, [(t, run_id, "add:1", {"id": t, "schema_version": 1}) for t in ids])
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
