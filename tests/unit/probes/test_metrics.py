"""Our metrics against scikit-learn / scipy and a straightforward ECE reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score, roc_auc_score

from probes.metrics import (
    accuracy,
    balanced_accuracy,
    evaluate,
    expected_calibration_error,
    f1,
    roc_auc,
    rvp,
    rvp_of,
    spearman,
)


def reference_ece(y: np.ndarray, p: np.ndarray, n_bins: int) -> float:
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for i in range(n_bins):
        lo, hi = edges[i], edges[i + 1]
        sel = (p >= lo) & ((p < hi) if i < n_bins - 1 else (p <= hi))
        if sel.sum():
            total += sel.sum() / len(p) * abs(p[sel].mean() - y[sel].mean())
    return total


@pytest.mark.parametrize("seed", range(6))
def test_classification_metrics_equal_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    y = rng.integers(0, 2, n)
    score = rng.normal(size=n) + 0.8 * y
    score[: n // 4] = np.round(score[: n // 4])  # ties
    pred = (score > 0.3).astype(int)
    assert accuracy(y, pred) == pytest.approx(accuracy_score(y, pred))
    assert balanced_accuracy(y, pred) == pytest.approx(balanced_accuracy_score(y, pred))
    assert f1(y, pred) == pytest.approx(f1_score(y, pred, zero_division=0))
    if 0 < y.sum() < n:
        assert roc_auc(y, score) == pytest.approx(roc_auc_score(y, score))
    rates = rng.random(n)
    assert spearman(score, rates) == pytest.approx(spearmanr(score, rates).statistic)


def test_degenerate_cases_follow_sklearn() -> None:
    y = np.array([1, 1, 1])
    pred = np.array([1, 0, 1])
    with pytest.warns(UserWarning):
        expected = balanced_accuracy_score(y, pred)
    assert balanced_accuracy(y, pred) == pytest.approx(expected)
    assert f1(np.array([0, 0]), np.array([0, 0])) == 0.0
    assert np.isnan(roc_auc(y, np.array([0.1, 0.2, 0.3])))


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
def test_ece_matches_reference(n_bins: int) -> None:
    rng = np.random.default_rng(n_bins)
    p = rng.random(500)
    p[:5] = [0.0, 1.0, 0.5, 0.2, 0.8]  # bin edges
    y = (rng.random(500) < p**1.5).astype(int)
    assert expected_calibration_error(y, p, n_bins) == pytest.approx(reference_ece(y, p, n_bins))


def test_ece_of_perfect_and_worst_calibration() -> None:
    assert expected_calibration_error(np.array([0, 1]), np.array([0.0, 1.0])) == 0.0
    assert expected_calibration_error(np.array([1, 0]), np.array([0.0, 1.0])) == 1.0


def test_rvp_is_population_variance_of_exact_rewards() -> None:
    rewards = [-20.0, 1.5, 2.5, -20.0]
    assert rvp(rewards) == pytest.approx(np.var(rewards))
    with pytest.raises(ValueError, match="at least one"):
        rvp([])
    with pytest.raises(ValueError, match="non-finite"):
        rvp([1.0, float("nan")])


def test_rvp_of_calls_the_reward_on_the_sample() -> None:
    def gated(texts: Sequence[str]) -> list[float]:
        return [-10.0 if t.startswith("bad") else float(len(t)) for t in texts]

    sample = ["bad1", "ok", "okay", "bad2"]
    assert rvp_of(gated, sample) == pytest.approx(np.var([-10.0, 2.0, 4.0, -10.0]))
    with pytest.raises(ValueError, match="None"):
        rvp_of(lambda s: [None, 1.0], ["a", "b"])


def test_evaluate_bundles_metrics() -> None:
    y = np.array([0, 1, 1, 0])
    m = evaluate(y, np.array([0.1, 0.9, 0.4, 0.2]), solve_rate=np.array([0.0, 0.25, 0.25, 1.0]))
    assert (m.n, m.positives, m.accuracy, m.balanced_accuracy) == (4, 2, 0.75, 0.75)
    assert m.roc_auc == 1.0
    assert m.spearman is not None
