"""The primary refresh's rules on the real store with a tiny real reference (#37): the holdout never holds
a task the champion trained on; an ensemble champion is judged and replaced as a whole ensemble; stale
retirement keeps the tasks the current solver version verified in band."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from curriculum.domains.arith import ArithDomain
from curriculum.frontier.refresh import load_refresh_data
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing.retrain import run_retrain
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import repo, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.loop.frontier import collect_refresh, retire_ready
from probes import FeatureExtractor, FeatureSpec, Probe, ProbeEnsemble, TrainConfig, evaluate, load_probe, save_probe
from probes.fit import fit_probe
from testkit.driver import make_driver, tick_to
from testkit.retrain_data import BAND, arith_run, artifacts_for, spec_for, spotcheck_version, tiny_reference

pytestmark = pytest.mark.integration

COMMON: dict[str, Any] = {"role": "primary", "refresh_min_labels": 16, "holdout_share": 0.25, "threshold": 0.5}


def test_the_holdout_leaves_out_every_task_the_champion_trained_on(store: Store, tmp_path: Path) -> None:
    """After an announce the champion's own training tasks get the newest labels; before #37 they were
    exactly "the most recent labels", the holdout the champion was judged on."""
    run_id, ids = arith_run(store, 160)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    ref, artifacts = tiny_reference(), artifacts_for(store, tmp_path)
    spotcheck_version(store, solver, ids, "", run_id)
    first = run_retrain(store, spec_for(run_id, ref, name="rf-primary-0", solver=solver.solver_id,
                                        staleness={"keep_versions": 9}, **COMMON),
                        ArithDomain(), FeatureExtractor(ref), artifacts)
    champion = load_probe(artifacts.local_path(first.result["artifact"]))
    trained = set(champion.training["task_ids"])
    assert first.state == "done" and len(trained) == first.result["train_rows"] and trained < set(ids)
    with store.session() as s:
        solver_versions.register(s, solver.solver_id, "step-2")
    solver.set_skill(7.0)
    spotcheck_version(store, solver, [t for t in ids if t not in trained], "step-2", run_id)
    spotcheck_version(store, solver, [t for t in ids if t in trained], "step-2", run_id)  # the newest labels
    policy = {"keep_versions": 1}
    newest = load_refresh_data(store, run_id, solver.solver_id, StalenessPolicy(keep_versions=1),
                               ArithDomain()).task_ids
    assert set(newest[-40:]) <= trained  # what the old rule held out: 40 tasks the champion trained on
    out = run_retrain(store, spec_for(run_id, ref, name="rf-primary-1", solver=solver.solver_id, staleness=policy,
                                      champion=first.result["artifact"], **COMMON),
                      ArithDomain(), FeatureExtractor(ref), artifacts)
    assert out.state == "done", out.reason
    challenger = load_probe(artifacts.local_path(out.result["artifact"]))
    held = set(newest) - set(challenger.training["task_ids"])
    assert len(held) == out.result["holdout_rows"] == 40 and not held & trained
    assert out.result["holdout_excluded"] == len(trained)


def test_an_ensemble_champion_is_judged_and_replaced_as_a_whole(store: Store, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """probes.members = 2: the challenger is 2 probes whose combined score is judged against the champion's
    2 members combined (before #37: member 0 alone), and a promotion activates both members (before: one)."""
    run_id, ids = arith_run(store, 160)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    ref, artifacts, extractor = tiny_reference(), artifacts_for(store, tmp_path), FeatureExtractor(tiny_reference())
    spotcheck_version(store, solver, ids, "", run_id)
    spec: dict[str, Any] = {"solver": solver.solver_id, "staleness": {"keep_versions": 9}, "members": 2,
                            "combine": "min", **COMMON}
    first = run_retrain(store, spec_for(run_id, ref, name="rf-ens-0", **spec), ArithDomain(), extractor, artifacts)
    assert first.state == "done" and first.result["members"] == 2 and len(first.result["member_probe_ids"]) == 2
    data = load_refresh_data(store, run_id, solver.solver_id, StalenessPolicy(keep_versions=9), ArithDomain())
    newest = load_refresh_data(store, run_id, solver.solver_id, StalenessPolicy(keep_versions=9), ArithDomain(),
                               recent=50)
    assert newest.task_ids == data.task_ids[-50:] and newest.labels.tolist() == data.labels[-50:].tolist()
    feature = FeatureSpec(layer=2, pooling="mean_full")
    flipped = fit_probe(extractor.extract(data.texts, [feature])[feature], 1 - data.labels, reference=ref,
                        spec=feature, band=BAND, arch="linear", config=TrainConfig(seed=0), name="flipped")
    champions = [first.result["artifacts"][0], artifacts.put_tree(save_probe(flipped, tmp_path / "flipped"))]
    out = run_retrain(store, spec_for(run_id, ref, name="rf-ens-1", champion=champions[0], champion_members=champions,
                                      **spec), ArithDomain(), extractor, artifacts)
    assert out.state == "done" and out.result["champion_uris"] == champions

    def probes(uris: list[str]) -> list[Probe]:
        return [load_probe(artifacts.local_path(u)) for u in uris]

    challengers = probes(out.result["artifacts"])
    hold = [i for i, t in enumerate(data.task_ids) if t not in set(challengers[0].training["task_ids"])]
    x, y = extractor.extract([data.texts[i] for i in hold], [feature]), data.labels[hold]
    for who, members in (("champion", probes(champions)), ("challenger", challengers)):
        got = evaluate(y, ProbeEnsemble(members, "min").probabilities(x))
        assert out.result[who]["balanced_accuracy"] == pytest.approx(got.balanced_accuracy), who
        assert out.result[who]["ece"] == pytest.approx(got.ece), who
    alone = evaluate(y, probes(champions)[0].probabilities(x))
    assert (alone.balanced_accuracy, alone.ece) != pytest.approx((out.result["champion"]["balanced_accuracy"],
                                                                  out.result["champion"]["ece"]))
    driver, _ = make_driver(store, tmp_path / "drv", run_name="rf")
    state = driver.state()[2]
    state.refresh_job = "rf-ens-0"  # the first (champion-less) job won: its whole ensemble takes the lead
    with caplog.at_level("INFO", logger="propel.frontier"):
        assert collect_refresh(driver, state)["primary_refreshed"] == 1.0
    sizes = f"trained on {first.result['train_rows']:,} labels, judged on {first.result['holdout_rows']:,} held out"
    assert any("challenger rf-ens-0 promoted" in m and sizes in m for m in caplog.messages), caplog.messages
    with store.session() as s:
        active = sorted(p.id for p in repo.active_probes(s, run_id) if p.role == "primary")
    assert active == sorted(first.result["member_probe_ids"])


def test_retirement_keeps_tasks_the_current_version_verified_in_band(store: Store, tmp_path: Path) -> None:
    """A ready task whose new score falls below the threshold goes stale — unless this run's spot-check of
    the current version verified it in band (emission trusts that verdict over any score)."""
    driver, _ = make_driver(store, tmp_path, min_probability=0.45)
    with store.session() as s:
        solver_versions.register(s, driver.spot.solver_id, "step-1")
    tick_to(driver, "retrain", 1)  # cycle 0 emitted ready tasks
    with store.session() as s:
        ready = [t for t, in s.execute(select(QueueItem.task_id).where(QueueItem.run_id == driver.run_id,
                                                                       QueueItem.state == "ready"))]
        other = repo.get_or_create_run(s, "another-run", "h", {})
    driver.s = replace(driver.s, min_probability=1.01)  # the new primary rates every ready task below it
    sid, old = driver.frontier.serving_id(), driver.spot.solver_id  # step-1, and the unversioned one before it
    with store.session() as s:  # the driver's own spot-checks of step-1 verdicts so far
        checked = dict(s.execute(select(Label.task_id, Label.in_band).where(
            Label.run_id == driver.run_id, Label.solver_id == sid, Label.task_id.in_(ready))).all())
    verified, stale_version, other_run = [t for t in ready if t not in checked][:3]
    with store.session() as s:
        for task, solver_id, run in ((verified, sid, driver.run_id), (stale_version, old, driver.run_id),
                                     (other_run, sid, other)):
            repo.upsert_label(s, task, solver_id, "spotcheck", run_id=run, k=8, solved=2, valid_trials=8,
                              band=(1, 3), in_band=True)
    kept = {verified} | {t for t, in_band in checked.items() if in_band}
    assert sid.endswith("@step-1") and len(ready) - len(checked) >= 3
    assert retire_ready(driver) == len(ready) - len(kept)
    with store.session() as s:
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state).where(QueueItem.task_id.in_(ready))).all())
    assert {t for t in ready if states[t] == "ready"} == kept


def test_a_champion_at_chance_is_replaced_though_its_ece_is_better(store: Store, tmp_path: Path) -> None:
    """A champion that predicts the base rate for every task is calibrated by construction and ranks nothing
    (#35: one at balanced accuracy 0.500, ECE 0.027 kept out better challengers for 380 cycles). Here it is
    calibrated on the very holdout it is judged on (ECE 0), so only the chance rule can promote the challenger."""
    import torch

    from curriculum.frontier.refresh import split_recent

    run_id, ids = arith_run(store, 160)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    ref, artifacts, extractor = tiny_reference(), artifacts_for(store, tmp_path), FeatureExtractor(tiny_reference())
    spotcheck_version(store, solver, ids, "", run_id)
    spec: dict[str, Any] = {"solver": solver.solver_id, "staleness": {"keep_versions": 9}, **COMMON}
    first = run_retrain(store, spec_for(run_id, ref, name="rf-chance-0", **spec), ArithDomain(), extractor, artifacts)
    assert first.state == "done", first.reason
    flat = load_probe(artifacts.local_path(first.result["artifact"]))
    data = load_refresh_data(store, run_id, solver.solver_id, StalenessPolicy(keep_versions=9), ArithDomain())
    trained = set(flat.training["task_ids"])
    _, hold = split_recent(list(range(len(data.task_ids))), COMMON["holdout_share"],
                           frozenset(i for i, t in enumerate(data.task_ids) if t in trained))
    base = float(data.labels[hold].mean())
    assert 0 < base < 1
    with torch.no_grad():  # every task gets the holdout's base rate: balanced accuracy 0.5, ECE 0
        for p in flat.head.body.parameters():
            p.zero_()
        flat.head.body[-1].bias.fill_(math.log(base / (1 - base)))
    uri = artifacts.put_tree(save_probe(flat, tmp_path / "flat"))
    out = run_retrain(store, spec_for(run_id, ref, name="rf-chance-1", champion=uri, **spec), ArithDomain(),
                      extractor, artifacts)
    assert out.state == "done", out.reason
    champ, chall = out.result["champion"], out.result["challenger"]
    assert champ["balanced_accuracy"] == pytest.approx(0.5) and champ["ece"] == pytest.approx(0.0, abs=1e-6)
    assert chall["balanced_accuracy"] > 0.5 and chall["ece"] > champ["ece"], out.result  # the ECE rule would keep it
    assert out.result["promote"] is True and "ranks at chance" in out.result["reason"], out.result["reason"]


def test_a_lowered_band_relabels_the_refresh_data_from_the_stored_counts(store: Store, tmp_path: Path) -> None:
    """``frontier.trainer_band_lead``: a refresh reads each label's solve counts against the lowered band, not the
    stored verdict of the band itself; the challenger records the band it was trained for."""
    run_id, ids = arith_run(store, 160)
    solver = SyntheticArithSolver(seed=1, offset=4.0)
    spotcheck_version(store, solver, ids, "", run_id)
    policy, lowered = StalenessPolicy(keep_versions=9), BAND.lowered(1)
    stored = load_refresh_data(store, run_id, solver.solver_id, policy, ArithDomain())
    aimed = load_refresh_data(store, run_id, solver.solver_id, policy, ArithDomain(), band=lowered)
    with store.session() as s:
        counts = dict(s.execute(select(Label.task_id, Label.solved).where(Label.run_id == run_id)).all())
    assert aimed.task_ids == stored.task_ids
    assert aimed.labels.tolist() == [int(lowered.lo <= counts[t] <= lowered.hi) for t in aimed.task_ids]
    assert stored.labels.tolist() == [int(BAND.lo <= counts[t] <= BAND.hi) for t in stored.task_ids]
    assert aimed.labels.tolist() != stored.labels.tolist()
    ref, artifacts = tiny_reference(), artifacts_for(store, tmp_path)
    out = run_retrain(store, spec_for(run_id, ref, name="rf-lead-0", solver=solver.solver_id, band_lo=lowered.lo,
                                      band_hi=lowered.hi, band_lead=1, staleness={"keep_versions": 9}, **COMMON),
                      ArithDomain(), FeatureExtractor(ref), artifacts)
    assert out.state == "done", out.reason
    probe = load_probe(artifacts.local_path(out.result["artifact"]))
    assert tuple(probe.band) == (0, 2)
    trained = probe.training["task_ids"]
    assert probe.training["positives"] == sum(aimed.labels[aimed.task_ids.index(t)] for t in trained)
