"""``Band.probability``: the exact chance that a task with success rate ``p`` lands in the band (the
solver-jump and active-labelling benchmarks score tasks with it). It must agree with the band rule
spot-checks apply (:meth:`probes.band.Band.in_band`) for every solve count."""

from __future__ import annotations

import math

import pytest

from probes.band import Band, Side


@pytest.mark.parametrize("band", [Band(k=8, lo=1, hi=3), Band(k=3, lo=1, hi=2), Band(k=8, lo=0, hi=8)])
@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 0.5, 0.93, 1.0])
def test_exact_in_band_probability_matches_the_band_rule(band: Band, p: float) -> None:
    by_rule = sum(math.comb(band.k, j) * p ** j * (1 - p) ** (band.k - j)
                  for j in range(band.k + 1) if band.in_band(j, band.k))
    assert band.probability(p) == pytest.approx(by_rule)


def test_a_task_the_solver_always_or_never_solves_is_never_in_a_band_inside_k() -> None:
    assert Band(k=8, lo=1, hi=3).probability(1.0) == 0.0
    assert Band(k=8, lo=1, hi=3).probability(0.0) == 0.0
    assert Band(k=8, lo=0, hi=8).probability(0.37) == pytest.approx(1.0)


@pytest.mark.parametrize("skill", [2.0, 4.5, 7.0])
@pytest.mark.parametrize("expr", ["1+1", "37*4-12", "(91*7+306)*45-819"])
def test_the_follow_benchmarks_sides_of_the_band_add_up_by_the_band_rule(skill: float, expr: str) -> None:
    """``testkit.follow_trainer``'s in-band and too-easy probabilities (the follow benchmarks' exact scores) are the
    binomial masses of the solve counts inside and above the band, as the band rule sides them."""
    from curriculum.solvers.synthetic import SyntheticArithSolver
    from testkit.follow_trainer import BAND, in_band_probability, too_easy_probability

    judge = SyntheticArithSolver(offset=skill, seed=0)
    p = judge.success_probability(expr)
    mass = {side: sum(math.comb(BAND.k, j) * p ** j * (1 - p) ** (BAND.k - j)
                      for j in range(BAND.k + 1) if BAND.side(j, BAND.k) == side) for side in Side}
    assert in_band_probability(judge, expr) == pytest.approx(mass[Side.IN_BAND])
    assert too_easy_probability(judge, expr) == pytest.approx(mass[Side.TOO_EASY])
    assert mass[Side.IN_BAND] + mass[Side.TOO_EASY] + mass[Side.TOO_HARD] == pytest.approx(1.0)
