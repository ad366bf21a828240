"""Drift: strata, stratified samples, transition matrix and score (pure functions, tables)."""

from __future__ import annotations

import pytest

from curriculum.frontier.drift import (
    drift_score,
    measured_pairs,
    old_strata,
    stratified_sample,
    stratum,
    transition_matrix,
)
from curriculum.frontier.staleness import LabelRecord, Weighted
from daemon.loop.frontier import drift_share
from probes.band import Band

BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)


@pytest.mark.parametrize(("solved", "valid", "in_band", "expected"), [
    (2, 8, True, "in_band"), (0, 8, False, "too_hard"), (5, 8, False, "too_easy"),
    (8, 8, False, "too_easy"), (1, 4, None, None), (0, 0, None, None),
    (1, 16, False, "too_hard"),  # rate 1/16 < 1/8
    (7, 16, False, "too_easy"),
])
def test_stratum_table(solved: int, valid: int, in_band: bool | None, expected: str | None) -> None:
    assert stratum(solved, valid, in_band, BAND) == expected


def test_stratified_sample_caps_each_stratum_and_is_deterministic() -> None:
    strata = {i: ("too_easy", "in_band", "too_hard")[i % 3] for i in range(30)} | {100: "in_band"}
    a = stratified_sample(strata, 4, seed=3)
    assert a == stratified_sample(strata, 4, seed=3)
    assert sorted(list(a.values()).count(s) for s in ("too_easy", "in_band", "too_hard")) == [4, 4, 4]
    assert all(strata[t] == s for t, s in a.items())
    assert stratified_sample({1: "too_hard"}, 4, seed=0) == {1: "too_hard"}


@pytest.mark.parametrize(("pairs", "score"), [
    ([], None),
    ([("too_easy", "too_easy")], None),                         # no formerly in-band task measured
    ([("in_band", "in_band")] * 3, 0.0),
    ([("in_band", "too_easy"), ("in_band", "in_band")], 0.5),
    ([("in_band", "too_easy"), ("in_band", "too_hard"), ("too_hard", "in_band")], 1.0),
    ([("in_band", "too_easy")] * 3 + [("in_band", "in_band")], 0.75),
])
def test_drift_score_table(pairs: list[tuple[str, str]], score: float | None) -> None:
    matrix = transition_matrix(pairs)
    assert sum(sum(r.values()) for r in matrix.values()) == len(pairs)
    assert drift_score(matrix) == (None if score is None else pytest.approx(score))


def _w(task: int, age: int, solved: int, source: str = "spotcheck", verdict: bool = True) -> Weighted:
    ib = (1 <= solved <= 3) if verdict else None
    return Weighted(LabelRecord(task, "p", str(10 - age), source, solved, 8, ib), age, 1.0)


def test_old_strata_use_the_freshest_older_label_and_ignore_the_new_version() -> None:
    weighted = [_w(1, 1, 2), _w(1, 2, 6), _w(2, 0, 2), _w(3, 1, 0), _w(4, 1, 2, verdict=False)]
    assert old_strata(weighted, BAND) == {1: "in_band", 3: "too_hard"}


def test_measured_pairs_prefer_spotchecks_and_skip_unlabelled() -> None:
    sample = {1: "in_band", 2: "too_hard", 3: "in_band"}
    labels = [LabelRecord(1, "p", "2", "spotcheck", 6, 8, False), LabelRecord(1, "p", "2", "consumer", 2, 8, True),
              LabelRecord(2, "p", "2", "consumer", 2, 8, True), LabelRecord(3, "p", "2", "spotcheck", 1, 3, None),
              LabelRecord(9, "p", "2", "spotcheck", 2, 8, True)]
    assert measured_pairs(sample, labels, BAND) == {1: ("in_band", "too_easy"), 2: ("too_hard", "in_band")}


@pytest.mark.parametrize(("budget", "share", "remaining", "n"), [
    (20, 0.25, 100, 5), (20, 0.25, 3, 3), (0, 0.25, 10, 0), (20, 0.0, 10, 0), (2, 0.1, 10, 1), (20, 1.0, 100, 20),
])
def test_drift_share_table(budget: int, share: float, remaining: int, n: int) -> None:
    assert drift_share(budget, share, remaining) == n
