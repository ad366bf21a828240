"""A spot-check phase harvests twice (labels that landed since the last phase, then the in-process
checks it just ran); its reported counts are the sum of both, not the second alone."""

from __future__ import annotations

from daemon.loop.driver import merge_harvests


def test_counts_add_up_and_ratios_come_from_the_harvest_that_labelled() -> None:
    first = {"labelled": 12.0, "false_positives": 3.0, "spotcheck_utility": 0.4, "probe_precision": 0.5}
    assert merge_harvests(first, {"labelled": 0.0, "false_positives": 0.0}) == first
    assert merge_harvests(first, {}) == first
    later = {"labelled": 4.0, "false_positives": 1.0, "spotcheck_utility": 0.25}
    assert merge_harvests(first, later) == {"labelled": 16.0, "false_positives": 4.0, "spotcheck_utility": 0.25,
                                            "probe_precision": 0.5}
    assert merge_harvests({}, later) == later
