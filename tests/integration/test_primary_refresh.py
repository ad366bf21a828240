"""Primary-probe refresh on the real store with a tiny real reference: a challenger trained on the
new solver version's labels replaces a champion trained on the old version's only when it wins on the
newest held-out labels; a tie keeps the champion; a promoted challenger retires ready queue tasks it
no longer rates as frontier while leased ones stay leased and stale ones are never served."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.domains.arith import ArithDomain
from curriculum.frontier import frontier_labels
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing import retrain
from curriculum.probing.retrain import run_retrain
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import lineage, queue, repo, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import ProbeRow, QueueItem
from daemon.loop.driver import Driver
from daemon.loop.frontier import FrontierSettings, FrontierTracker, collect_refresh
from daemon.loop.ports import Scored
from daemon.loop.state import DriverState
from probes import FeatureExtractor
from testkit.driver import FakeEngine, make_driver
from testkit.retrain_data import BAND, arith_run, artifacts_for, spec_for, spotcheck_version, tiny_reference

pytestmark = pytest.mark.integration


def test_challenger_replaces_the_champion_only_when_it_wins(store: Store, tmp_path: Path) -> None:
    run_id, ids = arith_run(store, 160)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    name = solver.solver_id
    ref = tiny_reference()
    artifacts = artifacts_for(store, tmp_path)  # challengers go to the store; the champion is fetched from it
    common = {"solver": name, "role": "primary", "refresh_min_labels": 16, "holdout_share": 0.3, "threshold": 0.5}
    spotcheck_version(store, solver, ids, "", run_id)  # the old, weak solver
    old = run_retrain(store, spec_for(run_id, ref, name="rf-primary-0", staleness={"keep_versions": 9},
                                      **common), ArithDomain(), FeatureExtractor(ref), artifacts)
    assert old.state == "done" and old.result["champion"] is None and old.result["promote"]
    with store.session() as s:
        champion_uri = s.scalars(select(ProbeRow.artifact_uri).where(ProbeRow.id == old.probe_id)).one()
    assert champion_uri.startswith("cas://sha256/") and artifacts.has_tree(champion_uri)
    with store.session() as s:
        solver_versions.register(s, name, "step-2")
    solver.set_skill(9.0)  # a much stronger checkpoint: the band moved to harder tasks
    spotcheck_version(store, solver, ids, "step-2", run_id)
    spec = spec_for(run_id, ref, name="rf-primary-1", staleness={"keep_versions": 1},
                    champion=champion_uri, **common)
    new = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts)
    assert new.state == "done" and new.probe_id is not None
    champ, chall = new.result["champion"], new.result["challenger"]
    assert new.result["promote"], new.result["reason"]
    assert chall["balanced_accuracy"] > champ["balanced_accuracy"] and chall["ece"] <= champ["ece"]
    redelivered = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts)
    assert redelivered == new  # redelivery: the recorded outcome
    with store.session() as s:
        row = s.scalars(select(ProbeRow).where(ProbeRow.id == new.probe_id)).one()
        new_uri = row.artifact_uri
    assert (row.role, row.active) == ("primary", False) and row.meta["refresh"]["promote"]
    # the same data, seed and feature again: an identical challenger ties and the champion stays
    tie = run_retrain(store, spec_for(run_id, ref, name="rf-primary-2", staleness={"keep_versions": 1},
                                      champion=new_uri, **common), ArithDomain(), FeatureExtractor(ref), artifacts)
    assert tie.state == "done" and not tie.result["promote"] and "does not beat" in tie.result["reason"]


def test_a_champion_of_another_solver_does_not_guard_this_ones_frontier(store: Store, tmp_path: Path) -> None:
    """#36: following a trainer, the first probe (trained on the configured solver's labels) kept out every
    challenger trained on the trainer's labels for 100 steps, both sides' accuracy being noise. The same
    solver's skill under two names: the challenger for the champion's own solver ties and stays out;
    the one for the other solver replaces it whatever the scores, and the verdict says why."""
    run_id, ids = arith_run(store, 160, name="rg")
    ref, artifacts = tiny_reference(), artifacts_for(store, tmp_path)
    mine, theirs = SyntheticArithSolver(seed=1, offset=4.0), SyntheticArithSolver(seed=1, offset=4.0)
    theirs.solver_id = "my-policy"  # the same skill under the trainer's name
    for solver in (mine, theirs):
        spotcheck_version(store, solver, ids, "", run_id)

    def refresh(name: str, solver: str, champion: str = "") -> retrain.RetrainOutcome:
        spec = spec_for(run_id, ref, name=name, solver=solver, champion=champion, role="primary",
                        refresh_min_labels=16, holdout_share=0.3, threshold=0.5, staleness={"keep_versions": 9})
        return run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts)

    first = refresh("rg-primary-0", mine.solver_id)
    with store.session() as s:
        champion = s.scalars(select(ProbeRow.artifact_uri).where(ProbeRow.id == first.probe_id)).one()
    same = refresh("rg-primary-1", mine.solver_id, champion)
    assert not same.result["promote"] and "does not beat" in same.result["reason"]
    other = refresh("rg-primary-2", "my-policy", champion)
    assert other.result["promote"], other.result["reason"]
    assert f"the champion learned {mine.solver_id}'s labels, not my-policy's" in other.result["reason"]
    with store.session() as s:
        promoted = s.scalars(select(ProbeRow.artifact_uri).where(ProbeRow.id == other.probe_id)).one()
    again = refresh("rg-primary-3", "my-policy", promoted)  # the new champion learned my-policy's labels: no loop
    assert not again.result["promote"] and "does not beat" in again.result["reason"]


def test_a_champion_aimed_ahead_does_not_guard_the_band_itself(store: Store, tmp_path: Path) -> None:
    """``frontier.trainer_band_lead = "auto"`` decides the lead anew at each refresh. A champion trained while
    the lead was 1 (aimed at 0-2 solves) is replaced by the next refresh at the band itself whatever the scores
    on the holdout, and the verdict says why; a refresh at its own band again is judged on accuracy alone."""
    run_id, ids = arith_run(store, 160, name="rl")
    ref, artifacts = tiny_reference(), artifacts_for(store, tmp_path)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    spotcheck_version(store, solver, ids, "", run_id)
    ahead = BAND.lowered(1)

    def refresh(name: str, lead: int, champion: str = "") -> retrain.RetrainOutcome:
        band = ahead if lead else BAND
        spec = spec_for(run_id, ref, name=name, solver=solver.solver_id, champion=champion, role="primary",
                        refresh_min_labels=16, holdout_share=0.3, threshold=0.5, staleness={"keep_versions": 9},
                        band_lo=band.lo, band_hi=band.hi, band_lead=lead)
        return run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts)

    def uri(outcome: retrain.RetrainOutcome) -> str:
        with store.session() as s:
            return s.scalars(select(ProbeRow.artifact_uri).where(ProbeRow.id == outcome.probe_id)).one()

    aimed = refresh("rl-primary-0", 1)
    assert aimed.state == "done" and aimed.result["promote"], aimed.result
    same = refresh("rl-primary-1", 1, uri(aimed))
    assert not same.result["promote"] and "does not beat" in same.result["reason"]
    back = refresh("rl-primary-2", 0, uri(aimed))
    assert back.result["promote"], back.result["reason"]
    assert "the champion aims at 0-2 of 8 solves, this refresh at 1-3 of 8" in back.result["reason"]


class RescoringEngine(FakeEngine):
    """The fake engine whose scores drop by 0.2 once a new primary is loaded: the refreshed probe
    rates the easy end of the old frontier lower (what a stronger solver's labels teach it)."""

    def score(self, texts: Sequence[str]) -> Scored:
        base = super().score(texts)
        if not self.loaded:
            return base
        probs = [max(0.0, p - 0.2) for p in base.probabilities]
        return Scored([p * 10 - 5 for p in probs], probs, base.ensemble)


def _tick_to(driver: Driver, phase: str, cycle: int) -> None:
    while driver.state()[:2] != (phase, cycle):
        driver.tick()


def test_driver_refresh_promotes_and_retires_ready_tasks_but_not_leased(store: Store, tmp_path: Path) -> None:
    frontier = FrontierSettings(refresh_every_labels=30, refresh_min_labels=16)
    driver, _ = make_driver(store, tmp_path, frontier=frontier, min_probability=0.45, retrain_min_false_positives=0)
    driver.engine = engine = RescoringEngine()
    _tick_to(driver, "retrain", 1)  # cycle 0 emitted tasks; the trainer leases a few of them
    with store.session() as s:
        leased = [x.task_id for x in queue.lease(s, 3, 600, "trainer", max_attempts=5, run_id=driver.run_id)]
    _tick_to(driver, "retrain", 2)
    state = driver.state()[2]
    with store.session() as s:
        primaries = [p for p in repo.active_probes(s, driver.run_id) if p.role == "primary"]
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state)).all())
    assert state.champion is not None and state.champion.probe == primaries[0].name != "primary"  # it leads
    assert state.totals.primary_refreshes == 1 and state.totals.stale_retired >= 1
    assert engine.loaded and engine.loaded[-1][0] == [primaries[0].artifact_uri]  # the reward hot-swapped
    stale = [t for t, st in states.items() if st == "stale"]
    assert stale and all(states[t] == "leased" for t in leased)
    with store.session() as s:
        served = [x.task_id for x in queue.lease(s, 1000, 600, "trainer-2", max_attempts=5, run_id=driver.run_id)]
    assert not set(served) & set(stale)
    kept = [t for t, st in states.items() if st == "ready"]
    with store.session() as s:  # the served tasks carry the new primary's probability, as leases select on it
        scores = lineage.latest_scores(s, kept)
        predicted = dict(s.execute(select(QueueItem.task_id, QueueItem.predicted_in_band)
                                   .where(QueueItem.task_id.in_(kept))).all())
    assert kept and all(predicted[t] == pytest.approx(scores[t][1]) for t in kept)


def test_label_count_refresh_keeps_firing_as_old_versions_age_out(store: Store) -> None:
    """`refresh_every_labels` counts labels written, not usable ones: under keep_last 1 every new
    version ages the previous labels out, so the usable count stays flat while the solver moves."""
    run_id, ids = arith_run(store, 40)
    solver = SyntheticArithSolver(seed=0)
    settings = FrontierSettings(staleness=StalenessPolicy(keep_versions=1), refresh_every_labels=15)
    tracker, state = FrontierTracker(store, run_id, solver.solver_id, settings, BAND), DriverState()
    fired = []
    for step, chunk in enumerate((ids[:20], ids[20:40])):
        version = f"step-{step + 1}"
        with store.session() as s:
            solver_versions.register(s, solver.solver_id, version)
        spotcheck_version(store, solver, chunk, version, run_id)
        fired.append(tracker.refresh_due(state))
        with store.session() as s:  # what start_refresh records when it starts the job
            state.refresh_labels_at = frontier_labels.labels_written(s, solver.solver_id, run_id)
    assert fired == ["20 new labels", "20 new labels"], fired


def test_a_skipped_refresh_is_tried_again_once_new_labels_arrive(store: Store, tmp_path: Path) -> None:
    """A challenger skipped for want of data (here: too few usable labels) leaves the refresh due:
    the driver's collect step records the skip, and the tracker asks again after
    ``retry_after_labels`` more labels — with the count trigger off, nothing else would."""
    frontier = FrontierSettings(refresh_every_labels=0, refresh_min_labels=32)
    driver, _ = make_driver(store, tmp_path, frontier=frontier)
    state = DriverState()
    spec = driver._retrain_spec(0, False)
    name = f"{spec.name}-primary-r0"
    retrain.create_job(store, replace(spec, name=name, role="primary", refresh_min_labels=32))
    retrain.finish_job(store, name, "skipped", "0 usable labels < 32")  # what run_retrain records
    state.refresh_job = name
    out = collect_refresh(driver, state)
    assert out["refresh_skipped"] == 1.0 and state.refresh_job is None
    assert state.refresh_retry is not None and "skipped" in state.refresh_retry
    tracker = driver.frontier
    assert tracker.refresh_due(state) is None  # no new labels yet
    dom = ArithDomain()
    new = [dom.validate_batch([f"{i} + {i + 1}"])[0].task for i in range(tracker.retry_after_labels)]
    with store.session() as s:
        ids = repo.add_tasks(s, driver.run_id, [repo.NewTask("arith", t.content_hash, t.text, True, t.payload, cycle=0)
                                                for t in new])
    spotcheck_version(store, SyntheticArithSolver(seed=1), ids, "", driver.run_id)  # the driver's spot-check solver
    assert (why := tracker.refresh_due(state)) is not None and why.startswith("retry"), why
