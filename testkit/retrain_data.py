"""A labelled run in the store (real spot-check pipeline, synthetic solver) and a tiny frozen
reference, for the aux-probe retrain tests (in-process, driver and Celery worker)."""

from __future__ import annotations

import random
from pathlib import Path

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.arith import ArithDomain, complexity, random_expression
from curriculum.labelling.spotcheck import false_positives, harvest_labels, run_spotcheck
from curriculum.probing.retrain import RetrainSpec
from curriculum.solvers import build_solver
from curriculum.store import lineage, repo, solver_versions
from curriculum.store.artifacts import ArtifactStore, open_artifacts
from curriculum.store.db import Store
from probes import FrozenReference
from probes.band import Band

BAND = Band(8, 1, 3, 6)


def tiny_reference(save_to: Path | None = None) -> FrozenReference:
    """A random 2-layer Qwen2 on the character tokenizer (saved to ``save_to`` for worker processes)."""
    from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2

    tok = build_char_tokenizer()
    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    if save_to is None:
        return FrozenReference(model, tok, model_id="tiny")
    save_tiny(model, tok, save_to)
    return FrozenReference.load(str(save_to))


def seed_labelled_run(store: Store, name: str = "rt", n_tasks: int = 60,
                      fp_threshold: float = 0.5) -> tuple[int, list[int]]:
    """A run with ``n_tasks`` valid arith tasks, ensemble scores (a function of complexity), k=8
    spot-check labels from the synthetic solver and the false positives among them (threshold 0.5)
    recorded as the leader records them (at ``fp_threshold``); returns (run id, task ids)."""
    dom, rng = ArithDomain(), random.Random(0)
    new: list[repo.NewTask] = []
    probs: list[float] = []
    seen: set[str] = set()
    while len(new) < n_tasks:
        v = dom.validate_batch([random_expression(rng, rng.randint(1, 7))])[0]
        if v.valid and v.task.content_hash not in seen:
            seen.add(v.task.content_hash)
            probs.append(min(0.99, complexity(v.task) / 10))
            new.append(repo.NewTask("arith", v.task.content_hash, v.task.text, True, v.task.payload,
                                    topic=dom.topic(v.task), cycle=0))
    with store.session() as s:
        run_id = repo.get_or_create_run(s, name, "h", {})
        ids = repo.add_tasks(s, run_id, new)
        pid = repo.register_probe(s, f"{name}-primary", "primary", "file:///p", "sha256:ref", {}, run_id=run_id)
        repo.set_active_probes(s, [pid], run_id)
        ens = lineage.record_ensemble(s, run_id, lineage.EnsembleSpec("min", ("file:///p",)))
        lineage.record_probe_scores(s, ens, [(i, p * 10 - 5, p) for i, p in zip(ids, probs, strict=True)])
    solver = build_solver("synthetic", seed=1)
    run_spotcheck(store, dom, solver, ids, BAND.k, Sampling())
    labels = harvest_labels(store, ids, solver.solver_id, BAND, run_id=run_id)
    by_id = dict(zip(ids, probs, strict=True))
    fps = false_positives([(t, True, by_id[t], lab) for t, lab in labels.items()], fp_threshold, BAND)
    with store.session() as s:  # what the leader's spot-check phase records
        lineage.add_false_positives(s, [(t, ens, side, solved, k, p) for t, side, solved, k, p in fps])
    return run_id, ids


def artifacts_for(store: Store, work_dir: Path) -> ArtifactStore:
    """The database artifact store (the distributed default) with a cache under ``work_dir``."""
    return open_artifacts("db", store, work_dir / "artifact-cache")


def spec_for(run_id: int, reference: FrozenReference, name: str = "rt-aux-c0",
             reference_path: str | None = None, **overrides: object) -> RetrainSpec:
    values: dict[str, object] = dict(
        run_id=run_id, name=name, cycle=0, reference=reference_path or reference.model_id,
        reference_fingerprint=reference.fingerprint, layer=2, pooling="mean_full", k=BAND.k, band_lo=BAND.lo,
        band_hi=BAND.hi, min_valid_trials=BAND.min_valid_trials, threshold=0.5, arch="linear",
        collapse_topic=False, seed=0)
    values.update(overrides)
    return RetrainSpec(**values)  # type: ignore[arg-type]


def arith_run(store: Store, n: int, name: str = "rf", seed: int = 5) -> tuple[int, list[int]]:
    """A run ``name`` with ``n`` distinct valid arith tasks (cycle 0); returns (run id, task ids)."""
    dom, rng = ArithDomain(), random.Random(seed)
    new: list[repo.NewTask] = []
    seen: set[str] = set()
    while len(new) < n:
        v = dom.validate_batch([random_expression(rng, rng.randint(1, 9))])[0]
        if v.valid and v.task.content_hash not in seen:
            seen.add(v.task.content_hash)
            new.append(repo.NewTask("arith", v.task.content_hash, v.task.text, True, v.task.payload, cycle=0))
    with store.session() as s:
        run_id = repo.get_or_create_run(s, name, "h", {})
        return run_id, repo.add_tasks(s, run_id, new)


def spotcheck_version(store: Store, solver: SolverBackend, ids: list[int], version: str, run_id: int) -> None:
    """Spot-check ``ids`` (k = ``BAND.k``) as ``version`` of ``solver`` and store run ``run_id``'s labels."""
    sid = solver_versions.qualified_id(solver.solver_id, version)
    run_spotcheck(store, ArithDomain(), solver, ids, BAND.k, Sampling(), solver_id=sid)
    harvest_labels(store, ids, sid, BAND, run_id=run_id)
