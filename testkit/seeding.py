"""Seeding a run's queue with small arith tasks (API tests)."""

from __future__ import annotations

from curriculum.store import queue, repo
from curriculum.store.db import Store


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
