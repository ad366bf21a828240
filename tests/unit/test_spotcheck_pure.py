"""Labels, false-positive mining, candidate selection and budgets: hand-built cases at the edges."""

from __future__ import annotations

import pytest

from curriculum.labelling.spotcheck import LabelValue, budget_left, compute_label, false_positives, select_candidates
from probes.band import Band

BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)


@pytest.mark.parametrize(("passes", "fails", "nulls", "solved", "in_band"), [
    (0, 8, 0, 0, False),   # never solved: too hard
    (1, 7, 0, 1, True),    # lower edge
    (3, 5, 0, 3, True),    # upper edge
    (4, 4, 0, 4, False),   # just above: too easy
    (8, 0, 0, 8, False),
    (1, 5, 2, 1, True),    # 6 valid trials = min_valid_trials
    (1, 4, 3, 1, None),    # 5 valid trials < 6: no label
    (0, 0, 8, 0, None),    # all null
])
def test_label_band_edges(passes: int, fails: int, nulls: int, solved: int, in_band: bool | None) -> None:
    label = compute_label(["pass"] * passes + ["fail"] * fails + ["null"] * nulls, BAND)
    assert (label.solved, label.valid_trials, label.in_band) == (solved, passes + fails, in_band)


def test_swe_band() -> None:
    swe = Band(k=3, lo=1, hi=2, min_valid_trials=2)
    assert compute_label(["pass", "null", "fail"], swe).in_band is True
    assert compute_label(["pass", "null", "null"], swe).in_band is None
    assert compute_label(["pass", "pass", "pass"], swe).in_band is False


def test_band_validation() -> None:
    with pytest.raises(ValueError, match="lo"):
        Band(k=8, lo=4, hi=3)
    with pytest.raises(ValueError, match="min_valid"):
        Band(k=3, lo=1, hi=2, min_valid_trials=4)


def test_false_positive_sides_and_filters() -> None:
    lab = {
        "hard": LabelValue(0, 8, False), "easy": LabelValue(6, 8, False),
        "edge": LabelValue(3, 8, True), "unlabelled": LabelValue(0, 3, None),
    }
    items = [
        (1, True, 0.9, lab["hard"]),        # probe-high, too hard → FP
        (2, True, 0.5, lab["easy"]),        # exactly at threshold, too easy → FP
        (3, True, 0.49, lab["easy"]),       # below threshold: not probe-high
        (4, False, 0.99, lab["hard"]),      # invalid tasks are not probe false positives
        (5, True, 0.95, lab["edge"]),       # in band: true positive
        (6, True, 0.95, lab["unlabelled"]),  # too few valid trials: unknown
    ]
    assert false_positives(items, threshold=0.5, band=BAND) == [
        (1, "too_hard", 0, 8, 0.9), (2, "too_easy", 6, 8, 0.5)]


def test_candidates_probe_high_first_then_random_slice() -> None:
    scored = [(i, i / 100) for i in range(100)]
    chosen = select_candidates(scored, budget=10, probe_high_share=0.7, threshold=0.5, seed=1)
    assert chosen[:7] == [99, 98, 97, 96, 95, 94, 93]
    assert len(chosen) == 10 and len(set(chosen)) == 10
    assert chosen == select_candidates(scored, 10, 0.7, 0.5, seed=1)
    assert chosen[7:] != select_candidates(scored, 10, 0.7, 0.5, seed=2)[7:]


def test_candidates_fill_when_few_are_probe_high() -> None:
    scored = [(1, 0.9), (2, 0.1), (3, 0.2), (4, 0.3)]
    chosen = select_candidates(scored, budget=3, probe_high_share=1.0, threshold=0.5, seed=0)
    assert chosen[0] == 1 and len(chosen) == 3
    assert select_candidates(scored, budget=0, probe_high_share=1.0, threshold=0.5, seed=0) == []
    assert sorted(select_candidates(scored, 10, 0.5, 0.5, 0)) == [1, 2, 3, 4]


def test_budget_left() -> None:
    assert budget_left(used_this_hour=0, per_hour=100, per_cycle=32) == 32
    assert budget_left(used_this_hour=90, per_hour=100, per_cycle=32) == 10
    assert budget_left(used_this_hour=120, per_hour=100, per_cycle=32) == 0
