"""Fit a probe from labelled features: the one place that splits, trains, validates and stamps a probe.

The daemon's first probe, aux probes from co-evolution, and the benchmarks all call
:func:`fit_probe`, so they share the split rule, the validation metrics and the artifact metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from probes.artifacts import Probe
from probes.band import Band
from probes.data import grouped_kfold
from probes.heads import ProbeHead
from probes.inputs import FeatureSpec
from probes.metrics import evaluate
from probes.reference import FrozenReference
from probes.training import TrainConfig, train_probe


def validation_split(labels: np.ndarray, val_share: float, seed: int,
                     groups: Sequence[str | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Train/validation indices; no validation set when it would leave a class out of training or when
    there are fewer than 10 rows.

    Without ``groups``: shuffled rows. With ``groups`` (``probes.validation = "grouped"``; SWE: the
    repository): whole groups are held out — one fold of :func:`probes.data.grouped_kfold` with
    ``round(1 / val_share)`` folds (fewer when there are fewer groups) — so no group is on both sides;
    fewer than two groups fall back to shuffled rows.
    """
    labels = np.asarray(labels)
    n_val = round(val_share * labels.size) if labels.size >= 10 else 0
    names = set() if groups is None else {str(g) for g in groups}
    if groups is not None and n_val and len(names) >= 2 and None not in set(groups):
        folds = grouped_kfold(groups, max(2, min(len(names), round(1 / val_share))), seed=seed)
        train, val = folds[0]
    else:
        order = np.random.default_rng(seed).permutation(labels.size)
        train, val = np.sort(order[n_val:]), np.sort(order[:n_val])
    if len(set(labels[train].tolist())) < 2:
        return np.arange(labels.size), np.arange(0)
    return train, val


def fit_head(x: np.ndarray, y: np.ndarray, *, arch: str, balance: str = "downsample",
             config: TrainConfig | None = None, val_share: float = 0.2,
             groups: Sequence[str | None] | None = None) -> tuple[ProbeHead, dict[str, Any]]:
    """Train a head on ``x``/``y`` (validation: ``val_share`` of the rows, whole ``groups`` when given,
    :func:`validation_split`).

    Returns the head and its metrics: ``train_rows``, ``best_epoch`` and ``validation`` (``grouped`` or
    ``rows``), plus the validation metrics (balanced accuracy, F1, ECE, AUC, …) when the validation
    rows contain both classes.
    """
    config = config or TrainConfig(seed=0)
    y = np.asarray(y).astype(int)
    tr, va = validation_split(y, val_share, config.seed, groups)
    has_val = va.size > 0 and len(set(y[va].tolist())) == 2
    result = train_probe(x[tr], y[tr], arch, balance, config, x[va] if va.size else None, y[va] if va.size else None)
    grouped = groups is not None and not {str(groups[i]) for i in tr} & {str(groups[i]) for i in va}
    metrics: dict[str, Any] = {"train_rows": int(result.train_rows), "best_epoch": result.best_epoch,
                               "validation": "grouped" if grouped and va.size else "rows"}
    if has_val:
        metrics |= evaluate(y[va], result.head.probabilities(x[va])).to_dict()
    return result.head, metrics


def fit_probe(x: np.ndarray, y: np.ndarray, *, reference: FrozenReference, spec: FeatureSpec, band: Band,
              arch: str, balance: str = "downsample", config: TrainConfig | None = None, name: str = "probe",
              training: dict[str, Any] | None = None, val_share: float = 0.2,
              groups: Sequence[str | None] | None = None) -> Probe:
    """Train a head with :func:`fit_head` and return the stamped probe (``metrics`` as there)."""
    head, metrics = fit_head(x, y, arch=arch, balance=balance, config=config, val_share=val_share, groups=groups)
    return Probe(head, spec, reference.model_id, reference.fingerprint, reference.hidden_size,
                 (band.lo, band.hi), band.k, name=name, training=dict(training or {}), metrics=metrics)
