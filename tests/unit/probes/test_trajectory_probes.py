"""Trajectory probes (issue #21 item 7): turn poolings, grouped validation, class-weighted loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from probes import FeatureExtractor, FeatureSpec, FrozenReference, Trajectory
from probes.data import grouped_kfold, random_kfold
from probes.fit import fit_head, validation_split
from probes.pooling import ATTENTION_TEMPERATURE, TURN_POOLINGS, pool_sequence, validate_turn_pooling
from probes.training import TrainConfig, _pos_weight, train_probe

TURNS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 4.0]])  # four turns, D = 2


def _attention_expected() -> list[float]:
    cos = [0.0, 1.0, 0.0, 1.0]  # cosine of each turn with the last one
    w = [math.exp(c / ATTENTION_TEMPERATURE) for c in cos]
    w = [x / sum(w) for x in w]
    return [sum(wi * float(t[d]) for wi, t in zip(w, TURNS, strict=True)) for d in range(2)]


@pytest.mark.parametrize(("name", "expected"), [
    ("mean", [1.0, 1.5]), ("last", [0.0, 4.0]), ("last_half", [1.5, 2.0]), ("last-half", [1.5, 2.0]),
    ("attention", _attention_expected()),
])
def test_turn_pooling_known_values(name: str, expected: list[float]) -> None:
    out = pool_sequence(TURNS, name)
    assert out.shape == (2,)
    assert torch.allclose(out, torch.tensor(expected), atol=1e-6)


@pytest.mark.parametrize("name", TURN_POOLINGS)
def test_turn_pooling_shape_and_single_turn(name: str) -> None:
    assert FeatureSpec(-1, "mean_full", name).output_dim(64) == 64
    assert FeatureSpec(-1, "mean_std_concat", name).output_dim(64) == 128
    one = torch.tensor([[0.5, -1.0, 2.0]])
    assert torch.allclose(pool_sequence(one, name), one[0])  # the spec generator: one turn


def test_unknown_turn_pooling() -> None:
    with pytest.raises(ValueError, match="unknown turn pooling"):
        validate_turn_pooling("median")
    assert FeatureSpec(-1, "mean_full", "last-half").turn_pooling == "last_half"


@pytest.mark.parametrize("name", TURN_POOLINGS)
def test_extractor_turn_poolings_on_a_trajectory(reference: FrozenReference, name: str) -> None:
    traj = Trajectory.from_messages([{"role": "user", "content": "12+3"}, {"role": "assistant", "content": "4-5"},
                                     {"role": "tool", "content": "99"}, {"role": "assistant", "content": "6+7="}])
    spec = FeatureSpec(-1, "mean_full", name)
    out = FeatureExtractor(reference).extract([traj, "1+2="], [spec])[spec]
    assert out.shape == (2, reference.hidden_size) and np.isfinite(out).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 11), min_size=6, max_size=80), st.integers(2, 6), st.integers(0, 10_000))
def test_grouped_split_never_shares_a_repository(repo_ids: list[int], n_folds: int, seed: int) -> None:
    groups = [f"repo{r}" for r in repo_ids]
    if len(set(groups)) < n_folds:
        with pytest.raises(ValueError):
            grouped_kfold(groups, n_folds, seed)
        return
    held_out = []
    for train, val in grouped_kfold(groups, n_folds, seed):
        assert not {groups[i] for i in train} & {groups[i] for i in val}
        held_out += val.tolist()
    assert sorted(held_out) == list(range(len(groups)))  # every row validated exactly once
    labels = np.array([i % 2 for i in range(len(groups))])
    train, val = validation_split(labels, 0.2, seed, groups)
    assert not {groups[i] for i in train} & {groups[i] for i in val}


def test_random_kfold_covers_rows_and_ignores_groups() -> None:
    folds = random_kfold(50, 5, seed=3)
    assert sorted(np.concatenate([v for _, v in folds]).tolist()) == list(range(50))
    assert all(len(v) == 10 and not set(t) & set(v) for t, v in folds)


def test_weighted_loss_equals_balanced_expectation() -> None:
    rng = np.random.default_rng(0)
    y = np.array([1] * 6 + [0] * 24)
    logits = torch.tensor(rng.normal(size=y.size), dtype=torch.float32)
    target = torch.tensor(y, dtype=torch.float32)
    weighted = torch.nn.BCEWithLogitsLoss(pos_weight=_pos_weight(y, "weighted"))(logits, target)
    per_row = torch.nn.BCEWithLogitsLoss(reduction="none")(logits, target)
    balanced = 0.5 * (per_row[target == 1].mean() + per_row[target == 0].mean())  # loss on a 50/50 population
    # weighted mean = (2 · negatives / rows) × balanced expectation: same minimiser, same gradients up to scale
    assert torch.allclose(weighted, balanced * 2 * 24 / 30, atol=1e-6)


def test_weighted_training_centres_an_uninformative_probe() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(400, 4)), np.array([1] * 80 + [0] * 320)
    cfg = TrainConfig(max_epochs=40, lr=1e-2, seed=0)
    mean_p = {b: float(train_probe(x, y, "linear", b, cfg).head.probabilities(x).mean()) for b in ("weighted", "none")}
    assert abs(mean_p["weighted"] - 0.5) < 0.1 and abs(mean_p["none"] - 0.2) < 0.1


def test_fit_head_grouped_validation_holds_out_whole_groups() -> None:
    rng = np.random.default_rng(2)
    groups = [f"r{i % 5}" for i in range(60)]
    y = np.array([i % 3 == 0 for i in range(60)], dtype=int)
    x = rng.normal(size=(60, 3)) + y[:, None]
    _, metrics = fit_head(x, y, arch="linear", balance="weighted", config=TrainConfig(max_epochs=5), groups=groups)
    assert metrics["validation"] == "grouped"
    _, rows = fit_head(x, y, arch="linear", balance="weighted", config=TrainConfig(max_epochs=5))
    assert rows["validation"] == "rows"
