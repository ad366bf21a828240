"""The phase driver on the real store with a hand-written engine fake (no model: the model side is
covered by the end-to-end runs) and the real in-process spot-check pipeline + synthetic solver."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.probing.retrain import job_outcome, run_retrain
from curriculum.store import lineage, queue, repo
from curriculum.store.db import Store
from curriculum.store.models import (
    FalsePositive,
    Label,
    MetricPoint,
    ProbeEnsembleRow,
    ProbeRow,
    ProbeScore,
    QueueItem,
    TaskRow,
)
from daemon.loop.ports import DispatchError
from probes import FeatureExtractor
from propel_sdk.schema import FrontierTask
from testkit.driver import QueuedRetrainer, make_driver, reference, tick_to
from testkit.retrain_data import artifacts_for

pytestmark = pytest.mark.integration


def test_three_cycles(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path)
    phases = [driver.tick().phase for _ in range(15)]
    assert phases == ["rl", "sample", "spotcheck", "retrain", "emit"] * 3
    phase, cycle, state = driver.state()
    assert (phase, cycle) == ("rl", 3)
    with store.session() as s:
        tasks = s.execute(select(func.count()).select_from(TaskRow)).scalar_one()
        invalid = s.execute(select(func.count()).select_from(TaskRow).where(~TaskRow.valid)).scalar_one()
        labels = s.execute(select(func.count()).select_from(Label)).scalar_one()
        fps = s.execute(select(func.count()).select_from(FalsePositive)).scalar_one()
        aux = s.scalars(select(ProbeRow).where(ProbeRow.role == "aux").order_by(ProbeRow.id)).all()
        msgs = [q.message for q in s.scalars(select(QueueItem))]
        metric_names = set(s.scalars(select(MetricPoint.name).where(MetricPoint.cycle == 2)))
    assert tasks > 60 and invalid >= 1 and labels >= 40
    assert fps >= 3 and aux and engine.loaded and engine.loaded[-1][1] == [aux[-1].artifact_uri]
    assert state.totals.emitted == len(msgs) > 0
    assert len({m["id"] for m in msgs}) == len(msgs)
    for m in msgs:
        FrontierTask.model_validate(m)
        assert m["spot_check"] is None or m["spot_check"]["in_band"] is not False
    assert {"validity", "self_bleu3", "distinct3", "top_topic_share", "reward_var", "emitted",
            "spotcheck_utility", "probe_precision", "solver_budget_used"} <= metric_names


def test_rerunning_a_phase_duplicates_nothing(store: Store, tmp_path: Path) -> None:
    driver, _ = make_driver(store, tmp_path)
    for _ in range(5):
        driver.tick()
    with store.session() as s:
        before = (s.execute(select(func.count()).select_from(TaskRow)).scalar_one(),
                  s.execute(select(func.count()).select_from(QueueItem)).scalar_one())
    # a crash right after the emit phase's writes but "before" the transition: replay cycle 0's phases
    for phase in ("sample", "spotcheck", "emit"):
        with store.session() as s:
            repo.save_state(s, driver.run_id, phase=phase, cycle=0, counters=driver.state()[2].stored())
        driver.tick()
    with store.session() as s:
        after = (s.execute(select(func.count()).select_from(TaskRow)).scalar_one(),
                 s.execute(select(func.count()).select_from(QueueItem)).scalar_one())
        ids = s.scalars(select(QueueItem.task_id)).all()
    assert after[0] == before[0] and len(ids) == len(set(ids))


class DownBroker:
    solver_id = "synthetic:down"

    def __init__(self) -> None:
        self.calls = 0

    def dispatch(self, task_ids: Sequence[int], k: int) -> None:
        self.calls += 1
        raise DispatchError("broker unreachable")


def test_broker_down_defers_spotchecks_and_rl_goes_on(store: Store, tmp_path: Path) -> None:
    driver, _ = make_driver(store, tmp_path)
    driver.spot = DownBroker()
    for _ in range(10):
        driver.tick()
    _, cycle, state = driver.state()
    assert cycle == 2 and state.spotcheck_undispatched and driver.spot.calls == 2


def _aux(store: Store) -> list[ProbeRow]:
    with store.session() as s:
        return list(s.scalars(select(ProbeRow).where(ProbeRow.role == "aux").order_by(ProbeRow.id)))


def test_a_queued_retrain_is_activated_before_the_next_rl_chunk(store: Store, tmp_path: Path) -> None:
    queued = QueuedRetrainer()
    driver, engine = make_driver(store, tmp_path, retrainer=queued)
    tick_to(driver, "retrain", 0)
    driver.tick()
    state = driver.state()[2]
    assert len(queued.specs) == 1 and state.retrain_job == queued.specs[0].name
    assert not _aux(store) and engine.loaded == []
    tick_to(driver, "retrain", 1)
    assert driver.tick().values["retrain_pending"] == 1.0  # the worker has not run: still pending
    assert len(queued.specs) == 1, "no second job while one is pending"
    worker = run_retrain(store, queued.specs[0], engine.domain, FeatureExtractor(reference()),  # the worker
                         artifacts_for(store, tmp_path / "worker"))
    assert worker.state == "done"
    tick_to(driver, "rl", 2)
    steps_before = engine.step
    report = driver.tick()  # the rl phase activates the finished probe, then trains
    aux = _aux(store)
    assert report.phase == "rl" and report.values["retrained"] == 1.0 and len(aux) == 1 and aux[0].active
    assert engine.step > steps_before
    assert engine.loaded[-1][1] == [aux[0].artifact_uri]
    with store.session() as s:
        consumed = set(s.scalars(select(FalsePositive.task_id).where(FalsePositive.consumed)))
    assert consumed == set(worker.false_positive_ids) and driver.state()[2].retrain_job is None


def test_retrain_dispatch_is_retried_when_the_broker_is_down(store: Store, tmp_path: Path) -> None:
    queued = QueuedRetrainer(fail_first=1)
    driver, _ = make_driver(store, tmp_path, retrainer=queued)
    tick_to(driver, "emit", 0)
    state = driver.state()[2]
    assert state.retrain_undispatched and queued.specs == [] and state.retrain_job
    assert job_outcome(store, state.retrain_job)
    tick_to(driver, "emit", 1)
    assert [s.name for s in queued.specs] == [state.retrain_job]  # the same job, re-sent
    assert driver.state()[2].retrain_undispatched is False


def test_a_retrain_with_no_outcome_is_given_up_after_the_timeout(store: Store, tmp_path: Path) -> None:
    queued = QueuedRetrainer()
    driver, _ = make_driver(store, tmp_path, retrainer=queued, retrain_timeout_s=0.0)
    tick_to(driver, "emit", 0)
    first = queued.specs[0].name
    tick_to(driver, "retrain", 1)
    report = driver.tick()
    outcome = job_outcome(store, first)
    assert outcome is not None and outcome.state == "failed" and "no outcome" in (outcome.reason or "")
    assert report.values["retrain_failed"] == 1.0
    assert len(queued.specs) == 2, "false positives still pending: a new job starts at once"


def test_every_emitted_message_names_the_ensemble_whose_score_it_carries(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path)
    loaded_at_emit: list[str] = []
    for _ in range(15):
        if driver.state()[0] == "emit":
            loaded_at_emit.append(engine.ensemble.key)
        driver.tick()
    with store.session() as s:
        msgs = [q.message for q in s.scalars(select(QueueItem).order_by(QueueItem.id))]
        keys_in_use = set(s.scalars(select(ProbeEnsembleRow.key).where(ProbeEnsembleRow.run_id == driver.run_id)))
        for m in msgs:
            ens = lineage.ensemble_by_key(s, driver.run_id, m["provenance"]["probe_ensemble_id"])
            assert ens is not None, m["provenance"]
            newest = s.scalars(select(ProbeScore).where(ProbeScore.task_id == m["id"])
                               .order_by(ProbeScore.id.desc()).limit(1)).one()
            assert newest.ensemble_id == ens.id and newest.probability == m["predicted_in_band"]
            assert [x["artifact_uri"] for x in ens.members] == ["file:///p"]
    assert msgs and len(keys_in_use) >= 2, "an aux probe was activated: a second ensemble scored later samples"
    # the retrain phase swapped the ensemble between a cycle's sample and its emit: those messages name
    # the ensemble that scored them, not the one loaded at emit time
    emitted_keys = {m["provenance"]["probe_ensemble_id"] for m in msgs}
    assert emitted_keys - set(loaded_at_emit), (emitted_keys, loaded_at_emit)


def test_one_validate_and_score_pass_per_sample_phase(store: Store, tmp_path: Path) -> None:
    driver, engine = make_driver(store, tmp_path, sample_size=30)
    for cycle in range(2):
        tick_to(driver, "sample", cycle)
        engine.domain.validated, engine.scorer.scored = 0, 0
        report = driver.tick()
        valid = round(report.values["validity"] * 30)
        assert engine.domain.validated == 30, "every sample is validated once (reward and RVP reuse it)"
        assert engine.scorer.scored == valid, "every valid sample is scored once"
        assert report.values["reward_var"] > 0


def test_a_starving_queue_gets_the_demand_sample_then_the_base_one(store: Store, tmp_path: Path) -> None:
    """daemon.sample_size_max: an empty queue → the cap; a queue the last emission filled → less, never
    below sample_size (cap − ready)."""
    driver, engine = make_driver(store, tmp_path, sample_size=30, sample_size_max=90)
    for cycle in range(2):
        tick_to(driver, "sample", cycle)
        with store.session() as s:
            ready = queue.ready_count(s, driver.run_id)
        engine.domain.validated = 0
        report = driver.tick()
        assert engine.domain.validated == report.values["sampled"] == max(30, 90 - ready)
        assert (ready == 0) is (cycle == 0), "cycle 0 samples into an empty queue; its emission fills it"
