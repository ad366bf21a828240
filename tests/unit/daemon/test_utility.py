"""Verified utility next to predicted utility (#34): the view, its line, and the cycle summary row."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from daemon.loop import hacking, utility
from daemon.loop.driver import CycleReport
from daemon.loop.hacking import SuspectLimits
from daemon.loop.progress import Progress


@pytest.mark.parametrize(("predicted", "in_band", "labelled", "verified", "line"), [
    (0.55, 3, 30, 0.1, "predicted 55% · verified 10% (30 labels, last 30 cycles)"),
    (0.55, 0, 0, None, "predicted 55% · unverified (no label of a probe-high task in the last 30 cycles)"),
    (None, 4, 4, 1.0, "predicted – · verified 100% (4 labels, last 30 cycles)"),
])
def test_view_and_line(predicted: float | None, in_band: int, labelled: int, verified: float | None,
                       line: str) -> None:
    v = utility.view(7, predicted, in_band, labelled, 30)
    assert v.verified == verified and v.labels == labelled
    status = v.as_status()
    assert status["line"] == line and status["unverified"] is (verified is None)


def _summary(spotcheck: dict[str, float]) -> str:
    buf = io.StringIO()
    progress = Progress(Console(file=buf, width=80, highlight=False, soft_wrap=True, force_terminal=False))
    progress(CycleReport("sample", 3, 0.5, {"validity": 0.97, "predicted_utility": 0.58}))
    progress(CycleReport("spotcheck", 3, 0.5, spotcheck))
    progress(CycleReport("emit", 3, 0.1, {"emitted": 4.0}))
    return buf.getvalue().splitlines()[-1]


def test_the_cycle_summary_shows_verified_next_to_predicted_or_says_unverified() -> None:
    assert "pred. util 58% │ verified util 12% │" in _summary({"verified_labels": 25.0, "verified_utility": 0.12})
    assert "pred. util 58% (unverified) │ emitted 4" in _summary({"verified_labels": 0.0})


@pytest.mark.parametrize(("sample_mean", "in_band", "labelled", "prob_sum", "labelled_predicted", "suspect"), [
    (0.9, 6, 10, 6.5, 0.65, False),  # the RL reward rose to 0.9: the labelled tasks' own scores say 0.65
    (0.9, 1, 10, 9.0, 0.9, True),  # probe-high tasks rated 0.9, one in ten in band: a real gap
    (0.9, 0, 0, 0.0, None, False),  # unverified: no gap
])
def test_the_gap_compares_like_with_like(sample_mean: float, in_band: int, labelled: int, prob_sum: float,
                                         labelled_predicted: float | None, suspect: bool) -> None:
    v = utility.view(7, sample_mean, in_band, labelled, 30, prob_sum)
    assert v.predicted == sample_mean  # still shown as the sample's predicted utility
    assert v.labelled_predicted == (pytest.approx(labelled_predicted) if labelled_predicted is not None else None)
    limits = SuspectLimits(max_gap=0.3, min_labels=10)
    assert bool(hacking.reasons(hacking.signals({"add:1": 5, "mul:2": 5}, {"add:1": 5, "mul:2": 5}, v),
                                limits)) is suspect
