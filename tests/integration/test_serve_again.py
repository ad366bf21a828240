"""``queue.serve_again`` (issue #36): a settled task of the run goes back to ``ready`` with its message marked,
its attempts reset and its place in the enqueue order kept; an open task or another run's is left alone; a
trainer's ack of an explored task gives a label marked ``explore``."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from curriculum.frontier.frontier_labels import TrainerOutcome, record_trainer_outcomes
from curriculum.store import queue, repo, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from probes.band import Band
from testkit.seeding import seed

pytestmark = pytest.mark.integration


def test_serve_again_brings_back_settled_tasks_only(store: Store) -> None:
    ids = seed(store, 4, run="a")
    other = seed(store, 1, run="b", schema_version=2)  # its own content hash: another task
    with store.session() as s:
        run_a = repo.get_or_create_run(s, "a", "h", {})
        got = queue.lease(s, 3, 60, "trainer", 5, run_id=run_a)
        for x in got[:2]:
            assert queue.ack(s, x.task_id, run_id=run_a, lease_token=x.lease_token, solved=1, n=8, solver="p@1") \
                == queue.AckStatus.ACKED
    with store.session() as s:  # ids[0], ids[1] acked; ids[2] leased; ids[3] ready
        again = queue.serve_again(s, run_a, [*ids, *other], {"remeasure": True})
    assert again == sorted(ids[:2])
    with store.session() as s:
        rows = {r.task_id: r for r in s.scalars(select(QueueItem).where(QueueItem.task_id.in_([*ids, *other])))}
        assert [rows[t].state for t in ids] == ["ready", "ready", "leased", "ready"]
        assert all(rows[t].message.get("remeasure") is True and rows[t].attempts == 0 for t in ids[:2])
        assert "remeasure" not in rows[ids[2]].message and "remeasure" not in rows[other[0]].message
        first = queue.lease(s, 2, 60, "trainer", 5, run_id=run_a)
    assert sorted(x.task_id for x in first) == sorted(ids[:2])  # their old place: served before newer rows


def test_an_explored_task_gives_an_explore_label(store: Store) -> None:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "x", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"e{i}", f"{i}+1", True, {"answer": i + 1})
                                         for i in range(2)])
        queue.enqueue(s, [(ids[0], run_id, "add:1", {"id": ids[0], "explore": True}),
                          (ids[1], run_id, "add:1", {"id": ids[1]})])
        solver_versions.register(s, "p", "step-1", source="ack")
        record_trainer_outcomes(s, [TrainerOutcome(t, "p", "step-1", 2, 8) for t in ids], Band(8, 1, 3, 6),
                                run_id=run_id)
    with store.session() as s:
        flags = {t: e for t, e in s.execute(select(Label.task_id, Label.explore))}
        explore_col = {t: e for t, e in s.execute(select(QueueItem.task_id, QueueItem.explore))}
    assert flags == {ids[0]: True, ids[1]: None} and explore_col == {ids[0]: True, ids[1]: None}
