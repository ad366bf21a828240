"""The first probe's corpus as the engine builds it (``curriculum.probing.first_probe``): uniform and active
labelling with the synthetic solver on real arith tasks; the one-class refusal."""

from __future__ import annotations

import random

import numpy as np
import pytest

from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain, complexity, random_expression
from curriculum.domains.base import Task
from curriculum.probing.first_probe import (
    ActiveSettings,
    OneClassCorpus,
    distinct_valid_tasks,
    label_corpus,
    label_corpus_actively,
)
from curriculum.solvers.synthetic import SyntheticArithSolver
from probes.band import Band

BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)


def _pool(n: int) -> list[Task]:
    rng = random.Random(3)
    texts = [random_expression(rng, rng.randint(1, 9)) for _ in range(n)]
    return distinct_valid_tasks(ArithDomain(), texts + texts[:5])  # duplicates are labelled once


def _features(tasks: list[Task]) -> np.ndarray:
    """What a probe would need: the task's complexity (with its square), plus noise columns."""
    c = np.array([complexity(t) for t in tasks])
    rng = np.random.default_rng(0)
    return np.column_stack([c / 10, (c / 10) ** 2, rng.normal(size=(len(tasks), 4))]).astype(np.float32)


def test_uniform_corpus_dedupes_labels_and_counts_trials() -> None:
    pool = _pool(120)
    assert len({t.content_hash for t in pool}) == len(pool)
    corpus = label_corpus(ArithDomain(), SyntheticArithSolver(seed=0), pool, BAND, Sampling(seed=1))
    assert corpus.solver_trials == len(pool) * BAND.k
    assert len(corpus.texts) == len(corpus.labels) == corpus.y.size <= len(pool)
    assert 0 < corpus.y.sum() < corpus.y.size


def test_active_corpus_spends_the_budget_and_returns_aligned_features() -> None:
    pool = _pool(240)
    x = _features(pool)
    settings = ActiveSettings(budget=96, seed_share=0.5, rounds=2, members=2, arch="linear", seed=0)
    notes: list[str] = []
    corpus, rows = label_corpus_actively(ArithDomain(), SyntheticArithSolver(seed=0), pool, x, BAND,
                                         Sampling(seed=1), settings, notes.append)
    assert corpus.solver_trials == 96 * BAND.k  # unusable labels are spent too
    assert rows.shape == (len(corpus.texts), x.shape[1]) and len(corpus.texts) <= 96
    by_text = {ArithDomain().reference_text(t): i for i, t in enumerate(pool)}
    assert all(np.array_equal(rows[j], x[by_text[text]]) for j, text in enumerate(corpus.texts))
    assert any("round 2/2" in n for n in notes) and 0 < corpus.y.sum() < corpus.y.size


def test_a_one_class_corpus_is_refused_with_the_fix() -> None:
    pool = _pool(40)
    hopeless = SyntheticArithSolver(offset=-50.0, seed=0)  # solves nothing: no task lands in band
    with pytest.raises(OneClassCorpus, match=r"band_lo/band_hi or probes\.train_samples"):
        label_corpus(ArithDomain(), hopeless, pool, BAND, Sampling(seed=1))
