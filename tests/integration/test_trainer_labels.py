"""Trainer outcomes are labels: acks sent over the real HTTP API with solver versions are read back by
the aux-probe retrain (spot-check and trainer labels of the same solver name, staleness applied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curriculum.domains.arith import ArithDomain
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing.retrain import load_samples, run_retrain
from curriculum.solvers import build_solver
from curriculum.store import queue
from curriculum.store.db import Store
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
