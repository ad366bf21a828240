"""Probe sweep over layer × pooling × architecture × balance, and the selection rule.

Splits: ``random`` = seeded 80/10/10 train/val/test (early stopping and selection on val, test
reported); ``kfold`` = K-fold over shuffled rows (groups ignored: one repository may sit in both
train and validation); ``group_kfold`` = grouped K-fold (groups = repository or topic, none in two
folds). In both K-fold splits each fold's held-out part is used for early stopping *and* scoring, as
in the paper's cross-repository protocol, which makes fold scores slightly optimistic.

Turn poolings: ``turn_poolings`` is a grid axis like ``poolings`` (``None`` = plain texts).

Selection (:func:`select`): among cells with validation ECE ≤ ``ece_ceiling`` (all cells when
none qualifies, flagged by ``ece_constraint_met=False``), take the best validation balanced
accuracy; with ``tiebreak="rvp"`` every cell within ``bacc_tolerance`` of that best competes on
RVP (higher wins), then on balanced accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

from probes.data import grouped_kfold, random_kfold, random_split
from probes.heads import ProbeHead
from probes.inputs import FeatureSpec
from probes.metrics import ProbeMetrics, evaluate, rvp
from probes.training import TrainConfig, train_probe

RewardFromLogits = Callable[[np.ndarray], np.ndarray]
Split = Literal["random", "kfold", "group_kfold"]
SPLITS: tuple[str, ...] = ("random", "kfold", "group_kfold")


@dataclass(frozen=True)
class SweepConfig:
    layers: tuple[int, ...]
    poolings: tuple[str, ...]
    architectures: tuple[str, ...] = ("linear", "mlp")
    balances: tuple[str, ...] = ("downsample",)
    turn_poolings: tuple[str | None, ...] = (None,)
    split: Split = "random"
    n_folds: int = 5
    seeds: tuple[int, ...] = (0,)
    ece_ceiling: float | None = 0.2
    bacc_tolerance: float = 0.01
    tiebreak: Literal["rvp", "none"] = "rvp"
    n_bins: int = 10
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        axes = ("layers", "poolings", "turn_poolings", "architectures", "balances", "seeds")
        empty = [n for n in axes if not getattr(self, n)]
        if empty:
            raise ValueError(f"sweep grid has empty axes: {', '.join(empty)}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")

    @property
    def specs(self) -> list[FeatureSpec]:
        return [FeatureSpec(layer, pooling, turn) for layer in self.layers for pooling in self.poolings
                for turn in self.turn_poolings]


@dataclass
class SweepRow:
    layer: int
    pooling: str
    turn_pooling: str | None
    arch: str
    balance: str
    val_balanced_accuracy: float
    val_accuracy: float
    val_f1: float
    val_ece: float
    val_auc: float
    val_spearman: float | None
    test_balanced_accuracy: float | None
    rvp: float | None
    best_epoch: float
    runs: int

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec(self.layer, self.pooling, self.turn_pooling)


@dataclass
class SweepResult:
    rows: list[SweepRow]
    selected: int
    ece_constraint_met: bool
    config: SweepConfig
    best_head: ProbeHead
    best_metrics: dict[str, float | int | None]

    @property
    def best(self) -> SweepRow:
        return self.rows[self.selected]


@dataclass
class _Fold:
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray | None


def _folds(config: SweepConfig, n: int, groups: Sequence[str | None] | None, seed: int) -> list[_Fold]:
    if config.split == "random":
        train, val, test = random_split(n, seed=seed)
        return [_Fold(train, val, test)]
    if config.split == "kfold":
        return [_Fold(tr, ho, None) for tr, ho in random_kfold(n, config.n_folds, seed=seed)]
    if groups is None:
        raise ValueError("split='group_kfold' needs a group for every row")
    return [_Fold(tr, ho, None) for tr, ho in grouped_kfold(groups, config.n_folds, seed=seed)]


def _mean(values: Sequence[float | None]) -> float | None:
    real = [v for v in values if v is not None and not np.isnan(v)]
    return float(np.mean(real)) if real else None


def _run_cell(
    x: np.ndarray,
    y: np.ndarray,
    rates: np.ndarray,
    folds_by_seed: dict[int, list[_Fold]],
    cell: tuple[FeatureSpec, str, str],
    config: SweepConfig,
    rvp_logits_to_value: Callable[[ProbeHead], float | None],
) -> tuple[SweepRow, ProbeHead]:
    spec, arch, balance = cell
    vals: list[ProbeMetrics] = []
    tests: list[float | None] = []
    rvps: list[float | None] = []
    epochs: list[float] = []
    first_head: ProbeHead | None = None
    for seed, folds in folds_by_seed.items():
        for fold in folds:
            cfg = replace(config.train, seed=seed)
            res = train_probe(x[fold.train], y[fold.train], arch, balance, cfg, x[fold.val], y[fold.val])
            first_head = first_head or res.head
            vals.append(
                evaluate(y[fold.val], res.head.probabilities(x[fold.val]), rates[fold.val], n_bins=config.n_bins)
            )
            if fold.test is not None:
                tests.append(
                    evaluate(y[fold.test], res.head.probabilities(x[fold.test]), n_bins=config.n_bins).balanced_accuracy
                )
            rvps.append(rvp_logits_to_value(res.head))
            epochs.append(float(res.best_epoch))
    assert first_head is not None
    row = SweepRow(
        layer=spec.layer, pooling=spec.pooling, turn_pooling=spec.turn_pooling, arch=arch, balance=balance,
        val_balanced_accuracy=_mean([m.balanced_accuracy for m in vals]) or 0.0,
        val_accuracy=_mean([m.accuracy for m in vals]) or 0.0,
        val_f1=_mean([m.f1 for m in vals]) or 0.0,
        val_ece=_mean([m.ece for m in vals]) or 0.0,
        val_auc=_mean([m.roc_auc for m in vals]) or float("nan"),
        val_spearman=_mean([m.spearman for m in vals]),
        test_balanced_accuracy=_mean(tests), rvp=_mean(rvps),
        best_epoch=float(np.mean(epochs)), runs=len(vals),
    )  # fmt: skip
    return row, first_head


def run_sweep(
    features: dict[FeatureSpec, np.ndarray],
    labels: np.ndarray,
    solve_rates: np.ndarray,
    config: SweepConfig,
    groups: Sequence[str | None] | None = None,
    rvp_features: dict[FeatureSpec, np.ndarray] | None = None,
    rvp_reward: RewardFromLogits | None = None,
    progress: Callable[[int], None] | None = None,
) -> SweepResult:
    """Train every cell (× seeds × folds) on pre-extracted ``features`` and select one.

    ``rvp_features`` are the same features for a fixed sample of current-policy generations;
    ``rvp_reward`` maps the probe's logits on that sample to the exact RL reward (validity gate
    included — the caller knows validity); identity (``probe_only``) when omitted.
    """
    y, rates = np.asarray(labels).astype(int), np.asarray(solve_rates, dtype=float)
    folds_by_seed = {seed: _folds(config, y.size, groups, seed) for seed in config.seeds}
    to_reward = rvp_reward or (lambda logits: logits)
    rows: list[SweepRow] = []
    heads: list[ProbeHead] = []
    for spec in config.specs:
        if spec not in features:
            raise KeyError(f"sweep needs feature {spec.name}, which was not extracted")
        sample = None if rvp_features is None else rvp_features[spec]
        measure = _rvp_measure(sample, to_reward)
        for arch in config.architectures:
            for balance in config.balances:
                row, head = _run_cell(features[spec], y, rates, folds_by_seed, (spec, arch, balance), config, measure)
                rows.append(row)
                heads.append(head)
                if progress is not None:
                    progress(1)
    selected, met = select(rows, config)
    best_head = heads[selected]
    if config.split != "random":
        best_head = refit_all(features[rows[selected].spec], y, rows[selected], config)
    return SweepResult(rows, selected, met, config, best_head, _summary(rows[selected]))


def _rvp_measure(sample: np.ndarray | None, to_reward: RewardFromLogits) -> Callable[[ProbeHead], float | None]:
    def measure(head: ProbeHead) -> float | None:
        return None if sample is None else rvp(to_reward(head.logits(sample)))

    return measure


def refit_all(x: np.ndarray, y: np.ndarray, row: SweepRow, config: SweepConfig) -> ProbeHead:
    """Retrain the chosen cell on all rows for its mean best epoch count (K-fold final probe)."""
    epochs = max(1, round(row.best_epoch))
    cfg = replace(config.train, seed=config.seeds[0], max_epochs=epochs)
    return train_probe(x, y, row.arch, row.balance, cfg).head


def _summary(row: SweepRow) -> dict[str, float | int | None]:
    return {
        "balanced_accuracy": row.val_balanced_accuracy,
        "accuracy": row.val_accuracy,
        "f1": row.val_f1,
        "ece": row.val_ece,
        "roc_auc": row.val_auc,
        "spearman": row.val_spearman,
        "test_balanced_accuracy": row.test_balanced_accuracy,
        "rvp": row.rvp,
    }


def select(rows: Sequence[SweepRow], config: SweepConfig) -> tuple[int, bool]:
    """Index of the selected row and whether the ECE ceiling could be met (module docstring)."""
    if not rows:
        raise ValueError("no sweep rows to select from")
    idx = list(range(len(rows)))
    ceiling = config.ece_ceiling
    eligible = idx if ceiling is None else [i for i in idx if rows[i].val_ece <= ceiling]
    met = bool(eligible)
    pool = eligible or idx
    best = max(rows[i].val_balanced_accuracy for i in pool)
    if config.tiebreak == "rvp":
        near = [i for i in pool if rows[i].val_balanced_accuracy >= best - config.bacc_tolerance]
        return max(near, key=lambda i: (rows[i].rvp or 0.0, rows[i].val_balanced_accuracy, -i)), met
    return max(pool, key=lambda i: (rows[i].val_balanced_accuracy, -i)), met


def row_dicts(rows: Sequence[SweepRow]) -> list[dict[str, object]]:
    return [asdict(r) for r in rows]
