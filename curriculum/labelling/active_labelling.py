"""Active labelling of the probe-training corpus: spend solver trials where the probe ensemble is unsure.

The uniform corpus (the daemon's first probe today) labels a random sample of base-policy tasks with
``k`` solver attempts each. :func:`label_actively` labels the same *number* of tasks from a larger
unlabelled pool, in rounds:

1. **Seed set** — ``round(seed_share × budget)`` pool items drawn uniformly (seeded).
2. **Rounds** — the rest of the budget in ``rounds`` near-equal slices. Before each slice a small
   ensemble (``members`` heads differing only by seed, fitted by ``fit`` on the usable labels so far)
   scores the whole pool, and :func:`select_uncertain` takes the unlabelled items the ensemble is least
   sure of. When the usable labels so far hold only one class no probe can be fitted: that round
   picks uniformly instead and says so (``RoundInfo.strategy == "uniform"`` and ``progress``).

Uncertainty of item *i* (lower = more uncertain) is ``|mean_i − 0.5| − std_i`` over the members'
probabilities: how far the ensemble's one-std interval stays from the decision threshold. Items the
mean puts near 0.5 (least certain) and items the members disagree on (high std) both come first;
ties go to the lower pool index, so a selection is a pure function of its inputs.

Pure: no solver, database or model here; the caller's ``label(indices)`` runs the solver on those pool
items and returns their :class:`~curriculum.labelling.spotcheck.LabelValue` s. An item whose ``in_band`` is
``None`` (too few valid trials) is not used for fitting, but it was labelled: it counts against the
budget (its trials were spent). ``benchmarks/active_labelling.py`` measures it against the uniform
corpus at equal budgets.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from curriculum.labelling.spotcheck import LabelValue
from probes.fit import fit_head
from probes.training import TrainConfig

#: ``fit(x, y, seed)`` trains one member on features ``x`` (N, D) and 0/1 labels ``y`` and returns its
#: probability function (features (M, D) → probabilities (M,)).
Predict = Callable[[np.ndarray], np.ndarray]
Fit = Callable[[np.ndarray, np.ndarray, int], Predict]
Label = Callable[[list[int]], Sequence[LabelValue]]


@dataclass(frozen=True)
class RoundInfo:
    """One round: ``strategy`` is ``seed`` (round 0), ``active`` or ``uniform`` (the one-class fallback)."""

    round: int
    strategy: str
    labelled: int
    usable: int
    positives: int
    note: str = ""


@dataclass
class ActiveResult:
    """Pool indices in the order they were labelled, their labels, and what each round did."""

    indices: list[int] = field(default_factory=list)
    labels: list[LabelValue] = field(default_factory=list)
    rounds: list[RoundInfo] = field(default_factory=list)

    @property
    def per_round(self) -> list[int]:
        """Tasks labelled in each round (seed set first)."""
        return [r.labelled for r in self.rounds]

    def usable(self) -> tuple[np.ndarray, np.ndarray]:
        """Pool indices and 0/1 in-band labels of the labelled items with a usable label."""
        rows = [(i, int(bool(lab.in_band))) for i, lab in zip(self.indices, self.labels, strict=True)
                if lab.in_band is not None]
        idx = np.array([i for i, _ in rows], dtype=int)
        return idx, np.array([y for _, y in rows], dtype=int)


def head_fitter(arch: str = "mlp", balance: str = "downsample", config: TrainConfig | None = None) -> Fit:
    """The default member fit: :func:`probes.fit.fit_head` (the daemon's split and training rule) with
    ``config`` (its seed replaced by the member's)."""
    base = config or TrainConfig()

    def fit(x: np.ndarray, y: np.ndarray, seed: int) -> Predict:
        head, _ = fit_head(x, y, arch=arch, balance=balance, config=replace(base, seed=seed))
        return head.probabilities

    return fit


def uncertainty(probabilities: np.ndarray) -> np.ndarray:
    """``|mean − 0.5| − std`` per item over the members (rows) of a (members × n) array; lower = less sure.

    A 1-D array is one member (std 0)."""
    p = np.asarray(probabilities, dtype=float)
    p = p[None, :] if p.ndim == 1 else p
    if p.ndim != 2 or p.shape[0] < 1:
        raise ValueError(f"probabilities must be (members, n), got shape {np.shape(probabilities)}")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("probabilities must be finite and within [0, 1]")
    out: np.ndarray = np.abs(p.mean(axis=0) - 0.5) - p.std(axis=0)
    return out


def select_uncertain(probabilities: np.ndarray, k: int, exclude: Collection[int] = ()) -> list[int]:
    """The ``k`` items (not in ``exclude``) with the lowest :func:`uncertainty`, most uncertain first;
    ties go to the lower index. Fewer when fewer are left."""
    if k < 0:
        raise ValueError(f"k must be ≥ 0, got {k}")
    score = uncertainty(probabilities)
    keep = np.ones(score.size, dtype=bool)
    banned = np.fromiter((i for i in exclude if 0 <= i < score.size), dtype=int)
    keep[banned] = False
    idx = np.flatnonzero(keep)
    order = np.lexsort((idx, score[idx]))  # last key is primary: score, then index
    return [int(i) for i in idx[order[:k]]]


def round_sizes(budget: int, seed_share: float, rounds: int) -> list[int]:
    """Tasks per round: the seed set (≥ 1), then the rest in ``rounds`` near-equal slices (larger first);
    empty slices are dropped."""
    if budget < 1:
        raise ValueError(f"budget must be ≥ 1 task, got {budget}")
    if not 0 < seed_share <= 1:
        raise ValueError(f"seed_share must be in (0, 1], got {seed_share}")
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1, got {rounds}")
    seed_n = min(budget, max(1, round(seed_share * budget)))
    base, extra = divmod(budget - seed_n, rounds)
    return [seed_n] + [s for s in (base + (r < extra) for r in range(rounds)) if s > 0]


def _check_features(features: np.ndarray) -> np.ndarray:
    x = np.asarray(features, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"features must be a non-empty (n, D) array, got shape {np.shape(features)}")
    if not np.isfinite(x).all():
        raise ValueError("features contain NaN or inf")
    return x


def _record(result: ActiveResult, label: Label, picks: list[int], number: int, strategy: str, note: str) -> None:
    labels = list(label(list(picks)))
    if len(labels) != len(picks):
        raise ValueError(f"label() returned {len(labels)} labels for {len(picks)} tasks")
    result.indices += picks
    result.labels += labels
    usable = [lab for lab in labels if lab.in_band is not None]
    result.rounds.append(RoundInfo(number, strategy, len(picks), len(usable),
                                   sum(1 for lab in usable if lab.in_band), note))


def _ensemble_probabilities(x: np.ndarray, rows: np.ndarray, y: np.ndarray, fit: Fit, members: int,
                            seed: int) -> np.ndarray:
    """(members × n) probabilities of the whole pool, member ``m`` fitted with seed ``seed + m``."""
    return np.stack([np.asarray(fit(x[rows], y, seed + m)(x), dtype=float).ravel() for m in range(members)])


def label_actively(features: np.ndarray, label: Label, *, budget: int, seed_share: float, rounds: int,
                   members: int, fit: Fit | None = None, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> ActiveResult:
    """Label ``budget`` pool items (rows of ``features``) in a seed round plus ``rounds`` active rounds.

    ``label(indices)`` labels pool items (one ``LabelValue`` each, in order); ``fit`` trains one ensemble
    member (default :func:`head_fitter`); ``seed`` fixes the seed set, the uniform fallback and the
    member seeds (``seed + m``). A budget above the pool size labels the whole pool (and says so).
    """
    if members < 1:
        raise ValueError(f"members must be ≥ 1, got {members}")
    x = _check_features(features)
    say = progress or (lambda _msg: None)
    if budget > x.shape[0]:
        say(f"active labelling: budget {budget} > pool {x.shape[0]}: labelling the whole pool")
        budget = x.shape[0]
    sizes = round_sizes(budget, seed_share, rounds)
    fit = fit or head_fitter()
    rng = np.random.default_rng(seed)
    result = ActiveResult()
    order = rng.permutation(x.shape[0])  # the seed set is the first items of the uniform corpus of this seed
    _record(result, label, [int(i) for i in order[:sizes[0]]], 0, "seed", "")
    say(f"active labelling: seed set {sizes[0]} tasks, {result.rounds[0].positives} in band")
    for number, size in enumerate(sizes[1:], start=1):
        rows, y = result.usable()
        if len(set(y.tolist())) < 2:
            note = (f"usable labels hold one class ({int(y.sum())} in band of {y.size}): "
                    "no probe to ask, uniform picks this round")
            taken = set(result.indices)
            rest = [int(i) for i in order if int(i) not in taken]
            picks = [rest[int(j)] for j in np.sort(rng.choice(len(rest), size, replace=False))]
            _record(result, label, picks, number, "uniform", note)
        else:
            probs = _ensemble_probabilities(x, rows, y, fit, members, seed)
            _record(result, label, select_uncertain(probs, size, set(result.indices)), number, "active", "")
        info = result.rounds[-1]
        say(f"active labelling: round {number}/{len(sizes) - 1} {info.strategy} {info.labelled} tasks, "
            f"{info.positives} in band" + (f" — {info.note}" if info.note else ""))
    return result
