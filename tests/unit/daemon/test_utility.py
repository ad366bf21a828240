"""Verified utility next to predicted utility (#34): the view, its line, and the cycle summary row."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from daemon.loop import utility
from daemon.loop.driver import CycleReport
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
