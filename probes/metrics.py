"""Probe metrics: classification, calibration, ranking, and reward variance under policy (RVP).

All functions take numpy-compatible 1-D arrays. Conventions follow scikit-learn where it has the
metric (balanced accuracy = mean recall over the classes present in ``y_true``; F1 with
``zero_division=0``; ROC AUC by the Mann–Whitney statistic with ties counted half), so tests
compare against it directly.

ECE here is the binned calibration error of the *positive-class* probability: equal-width bins
on [0, 1] (the last bin closed), ``ECE = Σ_b (n_b / N) · |mean(p in b) − mean(y in b)|``.

RVP (paper §3.3) is the variance of the **exact** reward the RL run will use, over a fixed sample
of current-policy generations. This library does not know task validity, so the caller computes
that reward — validity gate, floor and ensemble included — and passes the values to :func:`rvp`,
or passes the reward callable and the sample to :func:`rvp_of`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def _binary(y: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(y).astype(int).ravel()
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError("labels must be 0/1")
    return arr


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    t, p = _binary(y_true), _binary(y_pred)
    return float((t == p).mean()) if t.size else float("nan")


def balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean per-class recall over the classes present in ``y_true``."""
    t, p = _binary(y_true), _binary(y_pred)
    recalls = [float((p[t == c] == c).mean()) for c in (0, 1) if (t == c).any()]
    return float(np.mean(recalls)) if recalls else float("nan")


def f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """F1 of the positive class; 0 when there are no predicted and no true positives."""
    t, p = _binary(y_true), _binary(y_pred)
    tp = float(((t == 1) & (p == 1)).sum())
    denom = float((t == 1).sum() + (p == 1).sum())
    return 2.0 * tp / denom if denom else 0.0


def expected_calibration_error(y_true: np.ndarray, prob: np.ndarray, n_bins: int = 10) -> float:
    """Binned ECE of the positive-class probability (see module docstring)."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be ≥ 1, got {n_bins}")
    t, p = _binary(y_true).astype(float), np.asarray(prob, dtype=float).ravel()
    if t.size == 0:
        return float("nan")
    bins = np.minimum((p * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.mean() * abs(p[sel].mean() - t[sel].mean())
    return float(total)


def rankdata(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank (like ``scipy.stats.rankdata``)."""
    values = np.asarray(x, dtype=float).ravel()
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(values.size, dtype=float)
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], values.size]
    for s, e in zip(starts, ends, strict=True):
        ranks[order[s:e]] = 0.5 * (s + e + 1)
    return ranks


def roc_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC; NaN when only one class is present."""
    t = _binary(y_true)
    n_pos, n_neg = int(t.sum()), int((1 - t).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(score)
    return float((ranks[t == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN if either side is constant."""
    rx, ry = rankdata(x), rankdata(y)
    if rx.size < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def rvp(rewards: Sequence[float] | np.ndarray) -> float:
    """Reward variance under policy: population variance of the exact RL rewards of a fixed sample."""
    arr = np.asarray(rewards, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError("rvp needs at least one reward")
    if not np.isfinite(arr).all():
        raise ValueError("rvp got non-finite rewards; the reward function must return real numbers")
    return float(arr.var())


def rvp_of(reward_fn: Callable[[Sequence[T]], Sequence[float | None]], sample: Sequence[T]) -> float:
    """RVP of ``reward_fn`` (batch in, one reward per item out) over ``sample``.

    ``reward_fn`` must be the exact reward used in RL, validity gate included. A ``None`` reward
    (TRL's "skip") is an error here: RVP over a silently shrunk sample would mislead selection.
    """
    rewards = list(reward_fn(sample))
    if len(rewards) != len(sample):
        raise ValueError(f"reward_fn returned {len(rewards)} rewards for {len(sample)} samples")
    if any(r is None for r in rewards):
        raise ValueError("reward_fn returned None for some samples; RVP needs a reward for every sample")
    return rvp([float(r) for r in rewards if r is not None])


@dataclass(frozen=True)
class ProbeMetrics:
    n: int
    positives: int
    accuracy: float
    balanced_accuracy: float
    f1: float
    ece: float
    roc_auc: float
    spearman: float | None = None

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def evaluate(
    y_true: np.ndarray,
    prob: np.ndarray,
    solve_rate: np.ndarray | None = None,
    threshold: float = 0.5,
    n_bins: int = 10,
) -> ProbeMetrics:
    """All classification metrics at ``threshold``; Spearman(score, solve rate) when rates are given."""
    t, p = _binary(y_true), np.asarray(prob, dtype=float).ravel()
    pred = (p >= threshold).astype(int)
    return ProbeMetrics(
        n=int(t.size),
        positives=int(t.sum()),
        accuracy=accuracy(t, pred),
        balanced_accuracy=balanced_accuracy(t, pred),
        f1=f1(t, pred),
        ece=expected_calibration_error(t, p, n_bins),
        roc_auc=roc_auc(t, p),
        spearman=None if solve_rate is None else spearman(p, np.asarray(solve_rate, dtype=float)),
    )
