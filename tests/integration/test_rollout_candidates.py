"""daemon.emit_rollouts: the RL chunk's rollouts join the cycle's emission candidates (#35), on the real
store with the engine fake whose chunks score their rollouts with the real hard-gate reward."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import ProbeScore, QueueItem, TaskRow
from propel_sdk.schema import FrontierTask
from testkit.driver import make_driver, tick_to

pytestmark = pytest.mark.integration


def _rollout_rows(store: Store, run_id: int) -> list[TaskRow]:
    with store.session() as s:
        rows = s.scalars(select(TaskRow).where(TaskRow.run_id == run_id)).all()
        return [r for r in rows if r.payload.get("generator") == "rl_rollout"]


def test_each_rollout_is_stored_once_as_a_candidate_with_its_chunk_as_provenance(store: Store,
                                                                                 tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, emit_rollouts=True, steps_per_chunk=4)
    engine.rollout_batch = 24
    tick_to(driver, "sample", 0)  # the RL chunk ran: its reward validated and scored 24 rollouts
    rollouts, sample = engine.sample(24, seed=-4), engine.sample(40, seed=0)
    engine.domain.validated = 0
    report = driver.tick()
    assert report.values["rollouts"] == 24 and report.values["sampled"] == 40
    assert engine.domain.validated == 40 + 24, "the sample and the rollouts, each validated once here"
    assert engine.rollouts().texts == [], "taken once"
    rows = _rollout_rows(store, driver.run_id)
    # a rollout that repeats a task the sample stored first is not stored twice
    texts = [r.text for r in rows]
    assert set(texts) == {t for t in rollouts if t not in sample} and len(texts) == len(set(texts))
    assert all(r.cycle == 0 and r.generator_step is None and r.adapter_hash is None for r in rows)
    assert all(r.payload["rl_steps"] == [0, 4] for r in rows)
    valid_ids = [r.id for r in rows if r.valid]
    assert report.values["rollouts_valid"] >= len(valid_ids) > 0
    with store.session() as s:
        scored = set(s.scalars(select(ProbeScore.task_id).where(ProbeScore.task_id.in_(valid_ids))))
    assert scored == set(valid_ids), "every valid rollout carries a probe score (emission reads it)"


def test_emitted_rollouts_say_where_they_came_from(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, emit_rollouts=True, steps_per_chunk=4)
    engine.rollout_batch = 32
    for _ in range(10):  # two cycles
        driver.tick()
    rollout_ids = {r.id for r in _rollout_rows(store, driver.run_id)}
    with store.session() as s:
        msgs = [q.message for q in s.scalars(select(QueueItem).where(QueueItem.task_id.in_(rollout_ids)))]
    assert msgs, "some rollouts are emitted"
    for m in msgs:
        FrontierTask.model_validate(m)
        assert m["grading"]["generator"] == "rl_rollout" and m["grading"]["rl_steps"] in ([0, 4], [4, 8])
        assert m["provenance"]["generator_step"] is None


def test_rollouts_stay_out_when_the_setting_is_off(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, steps_per_chunk=4)
    engine.rollout_batch = 24
    for _ in range(5):
        report = driver.tick()
    assert _rollout_rows(store, driver.run_id) == [] and report.phase == "emit"
