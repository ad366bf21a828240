"""Sweep grid, splits, selection rule and saved outputs (on synthetic features: no model needed)."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from probes import FeatureSpec, FrozenReference, SweepConfig, TrainConfig, grouped_kfold, run_sweep, save_sweep, select
from probes.band import Band
from probes.data import group_split, random_split
from probes.sweep import SweepRow

FAST = TrainConfig(max_epochs=15, patience=3, hidden_dim=16, lr=5e-3)


def synthetic_features(n: int = 240, seed: int = 0) -> tuple[dict[FeatureSpec, np.ndarray], np.ndarray, list[str]]:
    """Layer 1 carries the label signal, layer 0 is noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    signal = rng.normal(size=(n, 8)) + 2.0 * y[:, None]
    noise = rng.normal(size=(n, 8))
    feats = {}
    for pooling in ("mean_full", "last_token"):
        feats[FeatureSpec(1, pooling)] = signal.astype(np.float32)
        feats[FeatureSpec(0, pooling)] = noise.astype(np.float32)
    groups = [f"repo{i % 6}" for i in range(n)]
    return feats, y, groups


def row(bacc: float, ece: float, rvp: float | None, layer: int = 0) -> SweepRow:
    return SweepRow(
        layer, "mean_full", None, "linear", "downsample", bacc, bacc, bacc, ece, 0.5, None, None, rvp, 1.0, 1
    )


def test_selection_rule_ece_ceiling_then_rvp_tiebreak() -> None:
    rows = [row(0.95, 0.40, 1.0), row(0.90, 0.05, 0.1), row(0.895, 0.05, 5.0), row(0.80, 0.01, 9.0)]
    config = SweepConfig(layers=(0,), poolings=("mean_full",), ece_ceiling=0.1, bacc_tolerance=0.01)
    assert select(rows, config) == (2, True)  # row 0 fails ECE; rows 1–2 tie within 0.01, row 2 has higher RVP
    assert select(rows, SweepConfig(layers=(0,), poolings=("mean_full",), ece_ceiling=0.1, tiebreak="none")) == (
        1,
        True,
    )
    assert select(rows, SweepConfig(layers=(0,), poolings=("mean_full",), ece_ceiling=None)) == (0, True)
    assert select(rows, SweepConfig(layers=(0,), poolings=("mean_full",), ece_ceiling=0.001)) == (0, False)


def test_random_split_sweep_finds_the_informative_layer(tmp_path: Path) -> None:
    feats, y, _ = synthetic_features()
    config = SweepConfig(layers=(0, 1), poolings=("mean_full", "last_token"), architectures=("linear",),
                         balances=("downsample", "weighted"), ece_ceiling=0.5, train=FAST)  # fmt: skip
    rvp_sample = {spec: x[:30] for spec, x in feats.items()}
    calls: list[int] = []
    result = run_sweep(feats, y, y * 0.25, config, rvp_features=rvp_sample, progress=calls.append)
    assert len(result.rows) == 8 and sum(calls) == 8
    assert result.best.layer == 1 and result.best.val_balanced_accuracy > 0.9
    assert all(r.rvp is not None and r.test_balanced_accuracy is not None for r in result.rows)
    paths = save_sweep(result, tmp_path)
    payload = json.loads(paths["json"].read_text())
    assert payload["selected_index"] == result.selected and len(payload["rows"]) == 8
    with paths["csv"].open() as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 8 and sum(int(r["selected"]) for r in table) == 1
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_group_kfold_sweep_and_gated_rvp() -> None:
    feats, y, groups = synthetic_features()
    config = SweepConfig(layers=(1,), poolings=("mean_full",), architectures=("linear",), split="group_kfold",
                         n_folds=3, train=FAST)  # fmt: skip
    sample = {spec: x[:20] for spec, x in feats.items()}
    valid = np.arange(20) % 2 == 0
    result = run_sweep(feats, y, y * 0.25, config, groups=groups, rvp_features=sample,
                       rvp_reward=lambda logits: np.where(valid, logits, -50.0))  # fmt: skip
    assert result.rows[0].runs == 3 and result.rows[0].rvp is not None and result.rows[0].rvp > 100
    assert result.best_head.input_dim == 8
    with pytest.raises(ValueError, match="group"):
        run_sweep(feats, y, y * 0.25, config)


def test_grouped_kfold_never_splits_a_group() -> None:
    groups = [f"g{i % 7}" for i in range(70)] + ["big"] * 30
    folds = grouped_kfold(groups, 4, seed=1)
    seen: set[str] = set()
    for train, held in folds:
        held_groups = {groups[i] for i in held}
        assert not held_groups & {groups[i] for i in train}
        assert not held_groups & seen
        seen |= held_groups
    assert seen == set(groups)
    with pytest.raises(ValueError, match="groups"):
        grouped_kfold(["a", "b"], 3)


def test_splits_cover_rows_once() -> None:
    parts = random_split(100, seed=0)
    assert [len(p) for p in parts] == [80, 10, 10]
    assert sorted(np.concatenate(parts).tolist()) == list(range(100))
    groups = [f"g{i % 10}" for i in range(100)]
    g_parts = group_split(groups, seed=0)
    assert sorted(np.concatenate(g_parts).tolist()) == list(range(100))
    assert len({groups[i] for i in g_parts[0]} & {groups[i] for i in g_parts[2]}) == 0


def test_band_labels_by_solve_rate() -> None:
    band = Band.parse("1-3", 8)
    assert [band.label(s, 8) for s in range(9)] == [0, 1, 1, 1, 0, 0, 0, 0, 0]
    swe = Band.parse("1-2", 3)
    assert (swe.label(1, 2), swe.label(0, 2), swe.label(2, 2)) == (1, 0, 0)  # one null trial
    with pytest.raises(ValueError, match="LO-HI"):
        Band.parse("one-three", 8)


def test_path_loaded_reference_pickles_as_its_source(tiny_dir: Path) -> None:
    ref = FrozenReference.load(str(tiny_dir))
    blob = pickle.dumps(ref)
    assert len(blob) < 2000  # source + fingerprint, not the weights
    clone = pickle.loads(blob)
    assert clone.fingerprint == ref.fingerprint and clone.source == str(tiny_dir)
