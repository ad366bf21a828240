"""Trainer outcomes are labels: acks sent over the real HTTP API with solver versions are read back by
the aux-probe retrain (spot-check and trainer labels of the same solver name, staleness applied)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.domains.arith import ArithDomain
from curriculum.frontier import frontier_labels, frontier_view
from curriculum.frontier.refresh import load_refresh_data
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing.retrain import load_samples, run_retrain
from curriculum.solvers import build_solver
from curriculum.store import queue, repo, transfer
from curriculum.store.db import Store
from curriculum.store.models import TaskRow
from daemon.http.api import ApiContext, create_app
from probes import FeatureExtractor
from propel_sdk.client import PropelClient
from testkit.retrain_data import artifacts_for, seed_labelled_run, spec_for, tiny_reference
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


def test_acked_outcomes_feed_the_retrain_with_staleness(store: Store, tmp_path: Path) -> None:
    run_id, ids = seed_labelled_run(store, n_tasks=40)  # spot-check labels, unversioned
    name = build_solver("synthetic", seed=1).solver_id
    spot_only = load_samples(store, run_id, ArithDomain(), name, StalenessPolicy())
    with store.session() as s:
        queue.enqueue(s, [(t, run_id, "x", {"id": t}) for t in ids[:12]])
    with serve_app(create_app(ApiContext(store=store, run_name="rt"))) as url, PropelClient(url) as client:
        client.announce(name, "step-1")
        leased = client.lease(n=12, lease_s=60, consumer="trainer")
        for i, task in enumerate(leased):  # the trainer's solver finds every one of these tasks in band
            client.ack(task, solved=2, n=8, errors=i % 2, solver=name, version="step-1")
    fresh = {x.task_id: x for x in load_samples(store, run_id, ArithDomain(), name, StalenessPolicy())}
    only_current = load_samples(store, run_id, ArithDomain(), name, StalenessPolicy(keep_versions=1))
    legacy = load_samples(store, run_id, ArithDomain())  # no solver: every spot-check label, as before
    assert len(spot_only) == len(legacy) > 12
    assert set(fresh) == {x.task_id for x in spot_only}  # same tasks, the acked ones relabelled
    assert all(fresh[t].label is not None and fresh[t].label.in_band for t in ids[:12])
    assert {x.task_id for x in only_current} == set(ids[:12])  # the unversioned labels are one version old
    assert {fresh[t].label.valid_trials for t in ids[:12] if fresh[t].label} == {7, 8}  # errors excluded
    ref = tiny_reference()
    spec = spec_for(run_id, ref, solver=name, staleness={"keep_versions": 1}, threshold=0.0)
    out = run_retrain(store, spec, ArithDomain(), FeatureExtractor(ref), artifacts_for(store, tmp_path))
    assert out.state == "skipped" and out.reason is not None  # 12 in-band trainer labels only: one class


def test_two_runs_replaying_a_task_keep_their_own_labels(store: Store) -> None:
    """Run B imports run A's tasks (``propel tasks import``) and both runs' trainers ack them as the same
    solver version: each run's readers — probe training, drift, refresh, status — see their own outcome
    (#37: the key (task, solver id, source) let B's ack overwrite A's label)."""
    run_a, ids = seed_labelled_run(store, name="ra", n_tasks=8)
    name = build_solver("synthetic", seed=1).solver_id
    with store.session() as s:
        queue.enqueue(s, [(t, run_a, "x", {"id": t}) for t in ids])
        run_b = repo.get_or_create_run(s, "rb", "h", {})
        rows = s.execute(select(TaskRow).where(TaskRow.id.in_(ids))).scalars().all()
        transfer.import_tasks(s, run_b, [transfer.ImportItem(
            repo.NewTask(r.domain, r.content_hash, r.text, True, dict(r.payload), topic=r.topic), {"id": r.id})
            for r in rows])
    solved_by = {"ra": 2, "rb": 8}  # run A's trainer: in band; run B's: too easy
    for run_name, solved in solved_by.items():
        with serve_app(create_app(ApiContext(store=store, run_name=run_name))) as url, PropelClient(url) as client:
            leased = client.lease(n=len(ids), lease_s=60, consumer=f"trainer-{run_name}")
            assert sorted(t.id for t in leased) == sorted(ids)
            for task in leased:
                client.ack(task, solved=solved, n=8, solver=name, version="step-1")
    policy = StalenessPolicy(keep_versions=1)
    with store.session() as s:
        got = {run: {w.label.task_id: w.label.solved
                     for w in frontier_labels.usable_labels(s, name, policy, run_id=rid)}
               for run, rid in (("ra", run_a), ("rb", run_b))}
        written = {run: frontier_labels.labels_written(s, name, rid) for run, rid in (("ra", run_a), ("rb", run_b))}
        versions = {run: [(v["version"], v["trainer_labels"]) for v in frontier_view.version_rows(s, rid)]
                    for run, rid in (("ra", run_a), ("rb", run_b))}
    assert got == {"ra": dict.fromkeys(ids, 2), "rb": dict.fromkeys(ids, 8)}
    assert written == {"ra": 2 * len(ids), "rb": len(ids)}  # A: its spot-checks + its acks; B: its acks only
    assert ("step-1", len(ids)) in versions["ra"] and versions["rb"] == [("step-1", len(ids))]
    refresh_a = load_refresh_data(store, run_a, name, policy, ArithDomain())
    assert refresh_a.labels.tolist() == [1] * len(ids)  # run A's refresh trains on A's in-band outcomes
    samples_b = load_samples(store, run_b, ArithDomain(), name, policy)
    assert {x.task_id for x in samples_b} == set(ids) and not any(x.label and x.label.in_band for x in samples_b)
