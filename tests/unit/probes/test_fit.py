"""probes.fit: the one probe-fitting function (split, train, validate, stamp)."""

from __future__ import annotations

import numpy as np

from probes.band import Band
from probes.fit import fit_head, fit_probe, validation_split
from probes.inputs import FeatureSpec
from probes.reference import FrozenReference
from probes.training import TrainConfig


def test_validation_split_keeps_both_classes_in_training() -> None:
    labels = np.array([0] * 18 + [1] * 2)
    tr, va = validation_split(labels, 0.2, seed=0)
    assert sorted(np.concatenate([tr, va]).tolist()) == list(range(20))
    assert set(labels[tr].tolist()) == {0, 1}
    assert validation_split(np.array([0, 1, 1]), 0.5, seed=0)[1].size == 0  # < 10 rows: no validation


def test_fit_probe_stamps_reference_band_and_metrics(tiny_model, char_tokenizer) -> None:  # type: ignore[no-untyped-def]
    reference = FrozenReference(tiny_model, char_tokenizer, model_id="tiny")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, reference.hidden_size)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    spec = FeatureSpec(layer=-1, pooling="last_token")
    probe = fit_probe(x, y, reference=reference, spec=spec, band=Band(8, 1, 3), arch="linear",
                      config=TrainConfig(seed=1, lr=0.05), name="p", training={"rows": 400})
    assert (probe.reference_fingerprint, probe.band, probe.k, probe.name) == (reference.fingerprint, (1, 3), 8, "p")
    assert probe.training == {"rows": 400}
    assert probe.metrics["balanced_accuracy"] > 0.7 and 0 < probe.metrics["train_rows"] <= 320


def test_fit_head_trains_without_a_reference() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (x[:, 1] > 0).astype(int)
    head, metrics = fit_head(x, y, arch="linear", config=TrainConfig(seed=2, lr=0.05))
    assert metrics["train_rows"] <= 160 and metrics["balanced_accuracy"] > 0.8
    assert ((head.probabilities(x) >= 0.5) == y).mean() > 0.8
