"""The solver-jump benchmark scores tasks by their exact chance of landing in the band: it must agree
with the band rule spot-checks apply (:meth:`probes.band.Band.in_band`) for every solve count."""

from __future__ import annotations

import math

import pytest

from benchmarks.solver_jump import in_band_probability
from probes.band import Band


@pytest.mark.parametrize("band", [Band(k=8, lo=1, hi=3), Band(k=3, lo=1, hi=2), Band(k=8, lo=0, hi=8)])
@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 0.5, 0.93, 1.0])
def test_exact_in_band_probability_matches_the_band_rule(band: Band, p: float) -> None:
    by_rule = sum(math.comb(band.k, j) * p ** j * (1 - p) ** (band.k - j)
                  for j in range(band.k + 1) if band.in_band(j, band.k))
    assert in_band_probability(p, band) == pytest.approx(by_rule)


def test_a_task_the_solver_always_solves_is_never_in_a_band_below_k() -> None:
    assert in_band_probability(1.0, Band(k=8, lo=1, hi=3)) == 0.0
    assert in_band_probability(0.0, Band(k=8, lo=1, hi=3)) == 0.0
