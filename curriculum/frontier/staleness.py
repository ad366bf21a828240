"""Staleness of labels: how much a label measured against an older solver version still counts.

A label says "version *v* of solver *name* solved this task *s* of *n* times". Once the trainer's
solver moves on, that verdict ages. Every use of labels — aux retrain, primary refresh, drift,
dashboard — goes through :func:`weigh` with one configurable :class:`StalenessPolicy`:

* ``keep_last`` (default, ``keep_versions = 3``): labels of the current version and the two before
  count fully, older ones not at all. Right after an announce the current version has few labels
  of its own; the previous versions' labels keep the probe fed until the drift re-measurement and
  trainer outcomes catch up, and older ones are dropped before they dominate. Three, not two, by
  measurement (``benchmarks/staleness.py``: the refreshed probe's balanced accuracy against the
  current version of an improving solver was highest with 3, in every seed and pace).
* ``half_life``: weight ``0.5 ** (age / half_life_versions)``; labels lighter than ``min_weight``
  are dropped.

*Age* is the number of distinct version orders above the label's version
(:func:`curriculum.store.solver_versions.ages`): 0 for the current version. A label whose version has no
age (an unordered legacy version, or one not registered) weighs 0. Labels of another solver *name*
never mix: they weigh 0 whatever their age.

Pure functions (no I/O); tested with tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

SOURCE_PREFERENCE = ("spotcheck", "consumer")  # at equal age: the daemon's own k trials first


@dataclass(frozen=True)
class StalenessPolicy:
    mode: Literal["keep_last", "half_life"] = "keep_last"
    keep_versions: int = 3
    half_life_versions: float = 1.0
    min_weight: float = 0.2

    def __post_init__(self) -> None:
        if self.mode not in ("keep_last", "half_life"):
            raise ValueError(f"staleness mode must be keep_last or half_life, got {self.mode!r}")
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be ≥ 1 (1 = current version only), got {self.keep_versions}")
        if self.half_life_versions <= 0:
            raise ValueError(f"half_life_versions must be > 0, got {self.half_life_versions}")
        if not 0 <= self.min_weight < 1:
            raise ValueError(f"min_weight must be in [0, 1), got {self.min_weight}")

    def weight(self, age: int | None) -> float:
        """The weight of a label ``age`` versions old (0: dropped)."""
        if age is None or age < 0:
            return 0.0
        if self.mode == "keep_last":
            return 1.0 if age < self.keep_versions else 0.0
        w = 0.5 ** (age / self.half_life_versions)
        return w if w >= self.min_weight and w > 0 else 0.0


@dataclass(frozen=True)
class LabelRecord:
    """A stored label as the policy sees it."""

    task_id: int
    solver_name: str
    solver_version: str
    source: str
    solved: int
    valid_trials: int
    in_band: bool | None
    at: datetime | None = None  # when the label was last written (the newest are held out by a refresh)


@dataclass(frozen=True)
class Weighted:
    label: LabelRecord
    age: int
    weight: float


def weigh(labels: Iterable[LabelRecord], solver_name: str, ages: Mapping[str, int | None],
          policy: StalenessPolicy) -> list[Weighted]:
    """The labels of ``solver_name`` that still count under ``policy``, with their age and weight.

    ``ages`` maps each version of ``solver_name`` to its age; labels of any other name are dropped.
    """
    out = []
    for lab in labels:
        if lab.solver_name != solver_name:
            continue
        age = ages.get(lab.solver_version)
        w = policy.weight(age)
        if w > 0 and age is not None:
            out.append(Weighted(lab, age, w))
    return out


def freshest_per_task(weighted: Iterable[Weighted]) -> dict[int, Weighted]:
    """One label per task: the youngest version; at equal age a spot-check before a trainer outcome
    (the daemon's own k trials at its own sampling), then the one with more valid trials."""
    def rank(w: Weighted) -> tuple[int, int, int]:
        src = w.label.source
        pref = SOURCE_PREFERENCE.index(src) if src in SOURCE_PREFERENCE else len(SOURCE_PREFERENCE)
        return (w.age, pref, -w.label.valid_trials)

    best: dict[int, Weighted] = {}
    for w in weighted:
        cur = best.get(w.label.task_id)
        if cur is None or rank(w) < rank(cur):
            best[w.label.task_id] = w
    return best
