"""A probe learns a known function of the text from tiny-model activations; training is deterministic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probes import (
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    TrainConfig,
    evaluate,
    random_split,
    train_probe,
)
from probes.training import balance_indices
from tests.unit.probes.conftest import assert_bit_identical, state_copy, synthetic_texts


@pytest.fixture(scope="module")
def synthetic(reference: FrozenReference) -> tuple[np.ndarray, np.ndarray]:
    texts, labels = synthetic_texts(400)
    spec = FeatureSpec(1, "last_token")  # the first block's output at the last character
    return FeatureExtractor(reference).extract(texts, [spec])[spec], np.array(labels)


def test_probe_learns_known_label_from_activations(
    reference: FrozenReference, synthetic: tuple[np.ndarray, np.ndarray]
) -> None:
    before = state_copy(reference.model)
    x, y = synthetic
    tr, va, te = random_split(len(y), seed=0, fractions=(0.6, 0.15, 0.25))
    config = TrainConfig(max_epochs=60, patience=10, lr=3e-3, hidden_dim=64, seed=0)
    for arch in ("linear", "mlp"):
        result = train_probe(x[tr], y[tr], arch, "downsample", config, x[va], y[va])
        metrics = evaluate(y[te], result.head.probabilities(x[te]))
        assert metrics.balanced_accuracy > 0.9, (arch, metrics)
    assert_bit_identical(before, reference.model)
    reference.verify_unchanged()


def test_training_is_seeded_and_deterministic(synthetic: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = synthetic
    config = TrainConfig(max_epochs=5, seed=3, hidden_dim=32)
    a = train_probe(x[:200], y[:200], "deep_mlp", "weighted", config, x[200:], y[200:])
    b = train_probe(x[:200], y[:200], "deep_mlp", "weighted", config, x[200:], y[200:])
    for key, tensor in a.head.state_dict().items():
        assert torch.equal(tensor, b.head.state_dict()[key])
    c = train_probe(x[:200], y[:200], "deep_mlp", "weighted", TrainConfig(max_epochs=5, seed=4, hidden_dim=32))
    assert not torch.equal(a.head.state_dict()["body.0.weight"], c.head.state_dict()["body.0.weight"])


def test_early_stopping_respects_patience(synthetic: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = synthetic
    result = train_probe(x[:50], y[:50], "mlp", "none", TrainConfig(max_epochs=500, patience=2), x[50:60], y[50:60])
    assert result.epochs_run < 500
    assert result.epochs_run - result.best_epoch == 2


def test_downsampling_balances_classes() -> None:
    labels = np.array([1] * 3 + [0] * 10)
    idx = balance_indices(labels, "downsample", seed=0)
    assert labels[idx].sum() == 3 and idx.size == 6
    assert np.array_equal(idx, balance_indices(labels, "downsample", seed=0))
    assert balance_indices(labels, "weighted", seed=0).size == 13
    with pytest.raises(ValueError, match="cannot downsample"):
        balance_indices(np.zeros(4, dtype=int), "downsample", seed=0)


def test_invalid_config_names_fields() -> None:
    with pytest.raises(ValueError, match=r"lr.*patience"):
        TrainConfig(lr=0.0, patience=0)
    with pytest.raises(ValueError, match="unknown architecture"):
        train_probe(np.zeros((4, 2)), np.array([0, 1, 0, 1]), "transformer")
