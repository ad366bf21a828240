"""curriculum.labelling.active_labelling: uncertainty selection, round budget, one-class fallback, end to end."""

from __future__ import annotations

import numpy as np
import pytest

from curriculum.labelling.active_labelling import (
    Predict,
    head_fitter,
    label_actively,
    round_sizes,
    select_uncertain,
    uncertainty,
)
from curriculum.labelling.spotcheck import LabelValue
from probes.training import TrainConfig


def _lab(in_band: bool | None) -> LabelValue:
    return LabelValue(2 if in_band else 0, 8 if in_band is not None else 3, in_band)


def test_select_uncertain_picks_mean_near_half_and_disagreement_first() -> None:
    probs = np.array([[0.95, 0.52, 0.10, 0.80, 0.40, 0.99],
                      [0.93, 0.48, 0.12, 0.20, 0.40, 0.97]])
    # item 3: mean 0.5 and the members disagree (std 0.3) → most uncertain; item 1: mean 0.5, std 0.02;
    # item 4: mean 0.4, std 0; the confident ones (0, 2, 5) come last.
    assert select_uncertain(probs, 3) == [3, 1, 4]
    assert select_uncertain(probs, 10) == [3, 1, 4, 2, 0, 5]
    assert uncertainty(probs)[3] < uncertainty(probs)[1] < uncertainty(probs)[4]


def test_select_uncertain_excludes_labelled_items_and_breaks_ties_by_index() -> None:
    probs = np.array([0.5, 0.7, 0.5, 0.3, 0.5, 0.9])  # one member; 0, 2, 4 tie, 1 and 3 tie
    assert select_uncertain(probs, 4) == [0, 2, 4, 1]
    assert select_uncertain(probs, 3, exclude={0, 4}) == [2, 1, 3]
    assert select_uncertain(probs, 0) == []
    assert select_uncertain(probs, 6, exclude=range(6)) == []


@pytest.mark.parametrize("bad", [np.array([[0.2, 1.5]]), np.array([[np.nan, 0.5]]), np.zeros((2, 2, 2))])
def test_select_uncertain_rejects_bad_probabilities(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="probabilities"):
        select_uncertain(bad, 1)


def test_round_sizes_spend_exactly_the_budget() -> None:
    assert round_sizes(100, 0.25, 3) == [25, 25, 25, 25]
    assert round_sizes(10, 0.25, 4) == [2, 2, 2, 2, 2]
    assert round_sizes(5, 0.2, 8) == [1, 1, 1, 1, 1]  # empty rounds dropped
    assert round_sizes(4, 1.0, 3) == [4]
    for budget, share, rounds in ((1, 0.5, 2), (37, 0.1, 4), (1024, 0.25, 5)):
        assert sum(round_sizes(budget, share, rounds)) == budget
    for args in ((0, 0.5, 2), (10, 0.0, 2), (10, 1.5, 2), (10, 0.5, 0)):
        with pytest.raises(ValueError):
            round_sizes(*args)


class _Oracle:
    """Labels pool items from a fixed array of in-band values (None = unusable) and logs each call."""

    def __init__(self, truth: list[bool | None]) -> None:
        self.truth: list[bool | None] = truth
        self.calls: list[list[int]] = []

    def __call__(self, indices: list[int]) -> list[LabelValue]:
        self.calls.append(list(indices))
        return [_lab(self.truth[i]) for i in indices]


def _threshold_fit(x: np.ndarray, y: np.ndarray, seed: int) -> Predict:
    """A member that puts its boundary midway between the classes' feature-0 means (seed shifts it a bit)."""
    cut = 0.5 * (x[y == 1, 0].mean() + x[y == 0, 0].mean()) + 0.01 * seed
    return lambda z: 1.0 / (1.0 + np.exp(-4.0 * (z[:, 0] - cut)))


def test_label_actively_spends_the_budget_on_distinct_tasks_near_the_boundary() -> None:
    x = np.linspace(-3, 3, 121)[:, None].astype(np.float32)
    oracle = _Oracle([bool(v > 0) for v in x[:, 0]])
    result = label_actively(x, oracle, budget=40, seed_share=0.25, rounds=3, members=2, fit=_threshold_fit, seed=1)
    assert len(result.indices) == len(set(result.indices)) == 40 == sum(result.per_round)
    assert result.per_round == [10, 10, 10, 10] and [r.strategy for r in result.rounds] == ["seed"] + ["active"] * 3
    assert [len(c) for c in oracle.calls] == result.per_round  # every task is labelled once
    active = result.indices[10:]
    assert np.abs(x[active, 0]).max() < 1.0 < np.abs(x[result.indices[:10], 0]).max()  # near the boundary
    again = label_actively(x, _Oracle(oracle.truth), budget=40, seed_share=0.25, rounds=3, members=2,
                           fit=_threshold_fit, seed=1)
    assert again.indices == result.indices  # deterministic


def test_one_class_seed_set_falls_back_to_uniform_and_says_so() -> None:
    x = np.arange(60, dtype=np.float32)[:, None]
    oracle = _Oracle([i >= 57 for i in range(60)])  # 3 positives: the seed set almost surely has none
    said: list[str] = []
    result = label_actively(x, oracle, budget=12, seed_share=0.25, rounds=3, members=2, fit=_threshold_fit,
                            seed=0, progress=said.append)
    assert result.rounds[0].positives == 0
    assert result.rounds[1].strategy == "uniform" and "one class" in result.rounds[1].note
    assert any("uniform picks" in line for line in said)
    assert len(set(result.indices)) == 12


def test_unusable_labels_count_against_the_budget_but_not_the_fit() -> None:
    x = np.linspace(-1, 1, 50)[:, None].astype(np.float32)
    oracle = _Oracle([None if i % 2 else bool(v > 0) for i, v in enumerate(x[:, 0])])
    seen: list[int] = []

    def fit(xs: np.ndarray, y: np.ndarray, seed: int) -> Predict:
        seen.append(len(y))
        return _threshold_fit(xs, y, seed)

    result = label_actively(x, oracle, budget=20, seed_share=0.5, rounds=2, members=1, fit=fit, seed=3)
    assert len(result.indices) == 20
    rows, y = result.usable()
    assert all(oracle.truth[i] is not None for i in rows) and y.size == sum(r.usable for r in result.rounds) < 20
    assert seen[0] == result.rounds[0].usable


def test_budget_above_the_pool_labels_the_pool_and_bad_arguments_fail_clearly() -> None:
    x = np.linspace(-1, 1, 8)[:, None].astype(np.float32)
    said: list[str] = []
    result = label_actively(x, _Oracle([bool(v > 0) for v in x[:, 0]]), budget=50, seed_share=0.5, rounds=2,
                            members=1, fit=_threshold_fit, progress=said.append)
    assert sorted(result.indices) == list(range(8)) and "whole pool" in said[0]
    with pytest.raises(ValueError, match="members"):
        label_actively(x, _Oracle([True] * 8), budget=4, seed_share=0.5, rounds=1, members=0)
    with pytest.raises(ValueError, match="label\\(\\) returned"):
        label_actively(x, lambda idx: [], budget=4, seed_share=0.5, rounds=1, members=1)


def test_end_to_end_with_the_default_head_fitter_on_synthetic_features() -> None:
    """Real probe heads (probes.fit.fit_head) on noisy synthetic features: it runs, and the active
    rounds concentrate on the ambiguous region where the uniform seed set does not."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    p_in = 1.0 / (1.0 + np.exp(-6.0 * x[:, 0]))  # in band ⇔ feature 0 > 0, noisy near 0
    oracle = _Oracle([bool(u < p) for u, p in zip(rng.random(400), p_in, strict=True)])
    fit = head_fitter("mlp", config=TrainConfig(hidden_dim=16, max_epochs=30, patience=5, lr=1e-2))
    result = label_actively(x, oracle, budget=80, seed_share=0.5, rounds=2, members=2, fit=fit, seed=0)
    assert len(set(result.indices)) == 80 and [r.strategy for r in result.rounds] == ["seed", "active", "active"]
    seed_distance = np.abs(x[result.indices[:40], 0]).mean()  # ≈ 0.8 = E|N(0, 1)|
    active_distance = np.abs(x[result.indices[40:], 0]).mean()
    assert active_distance < 0.6 * seed_distance
