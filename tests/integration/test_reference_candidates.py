"""daemon.reference_share: the untrained generator's sample joins the cycle's emission candidates, on the real
store with the engine fake (its ``sample_reference`` stays mixed and valid whatever the policy collapses to)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import ProbeScore, QueueItem, TaskRow
from propel_sdk.schema import FrontierTask
from testkit.driver import make_driver, tick_to

pytestmark = pytest.mark.integration


def _reference_rows(store: Store, run_id: int) -> list[TaskRow]:
    with store.session() as s:
        rows = s.scalars(select(TaskRow).where(TaskRow.run_id == run_id)).all()
        return [r for r in rows if r.payload.get("generator") == "reference"]


def test_a_share_of_the_sample_more_comes_from_the_untrained_generator(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, reference_share=0.25)  # sample_size 40
    tick_to(driver, "sample", 0)
    engine.domain.validated = 0
    report = driver.tick()
    assert engine.reference_calls == [10] and report.values["sampled"] == 40
    assert report.values["reference"] == 10 and engine.domain.validated == 40 + 10
    rows = _reference_rows(store, driver.run_id)
    assert 0 < len(rows) <= 10 and all(r.cycle == 0 and r.generator_step is None for r in rows)
    assert report.values["reference_valid"] == sum(r.valid for r in rows) == len(rows)
    with store.session() as s:
        scored = set(s.scalars(select(ProbeScore.task_id).where(ProbeScore.task_id.in_([r.id for r in rows]))))
    assert scored == {r.id for r in rows}, "every valid reference task carries a probe score (emission reads it)"
    policy = driver._cycle_metrics(0)
    assert policy["validity"] == pytest.approx(36 / 40), "the sample's metrics describe the policy alone"


def test_a_collapsed_policy_still_reaches_other_topics_through_the_reference(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, reference_share=0.5)
    engine.topic_collapse = True  # every valid policy task is one operator signature
    for _ in range(10):  # two cycles
        driver.tick()
    ids = {r.id for r in _reference_rows(store, driver.run_id)}
    with store.session() as s:
        items = s.scalars(select(QueueItem).where(QueueItem.run_id == driver.run_id)).all()
    reference = [q.message for q in items if q.task_id in ids]
    assert reference, "reference tasks are emitted"
    for m in reference:
        FrontierTask.model_validate(m)
        assert m["grading"]["generator"] == "reference" and m["provenance"]["generator_step"] is None
    topics = {q.message["topic"] for q in items}
    assert len(topics) > 1, "the queue holds more than the collapsed policy's one topic"


def test_no_reference_sample_by_default(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path)
    for _ in range(5):
        report = driver.tick()
    assert engine.reference_calls == [] and _reference_rows(store, driver.run_id) == []
    assert report.phase == "emit"
