"""One definition of "in band" (probes.band.Band), the same answer wherever a label is made."""

from __future__ import annotations

import pytest

from curriculum.labelling.spotcheck import compute_label
from probes.band import Band, Side


@pytest.mark.parametrize(("solved", "valid", "side"), [
    (0, 8, Side.TOO_HARD), (1, 8, Side.IN_BAND), (3, 8, Side.IN_BAND), (4, 8, Side.TOO_EASY),
    (8, 8, Side.TOO_EASY),
    (3, 7, Side.TOO_EASY),   # 3/7 > 3/8: a null trial does not make a task harder than it is
    (1, 6, Side.IN_BAND), (0, 6, Side.TOO_HARD),
    (2, 5, Side.INSUFFICIENT),  # fewer than min_valid_trials = 6
    (0, 0, Side.INSUFFICIENT),
])
def test_band_sides_for_k8_band_1_3(solved: int, valid: int, side: Side) -> None:
    band = Band(8, 1, 3, 6)
    assert band.side(solved, valid) is side
    assert band.in_band(solved, valid) == (None if side is Side.INSUFFICIENT else side is Side.IN_BAND)


def test_swe_band_counts_a_null_trial_out() -> None:
    band = Band(3, 1, 2, 2)
    assert [band.side(s, 2) for s in range(3)] == [Side.TOO_HARD, Side.IN_BAND, Side.TOO_EASY]
    assert band.side(1, 1) is Side.INSUFFICIENT


def test_spotcheck_labels_agree_with_the_band() -> None:
    band = Band(8, 1, 3, 6)
    label = compute_label(["pass", "pass", "pass", "fail", "fail", "fail", "fail", "null"], band)
    assert (label.solved, label.valid_trials, label.in_band) == (3, 7, False)
    assert label.side(band) == "too_easy"


@pytest.mark.parametrize("args", [(0, 0, 0), (8, 4, 3), (8, 1, 9), (3, 1, 2, 4)])
def test_bad_bands_are_refused(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        Band(*args)


def test_impossible_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="solved=5"):
        Band().side(5, 4)


@pytest.mark.parametrize(("lead", "lo", "hi"), [(0, 1, 3), (1, 0, 2), (2, 0, 1), (3, 0, 0), (9, 0, 0)])
def test_a_lowered_band_moves_both_ends_down_and_stops_at_zero(lead: int, lo: int, hi: int) -> None:
    band = Band(8, 1, 3, 6).lowered(lead)
    assert (band.k, band.lo, band.hi, band.min_valid_trials) == (8, lo, hi, 6)
    assert [s for s in range(9) if band.in_band(s, 8)] == list(range(lo, hi + 1))


def test_a_negative_lead_is_refused() -> None:
    with pytest.raises(ValueError, match="lead must be ≥ 0"):
        Band().lowered(-1)
