"""Pure scheduling decisions, checked on tables."""

from __future__ import annotations

import pytest

from daemon.loop.phases import (
    PHASES,
    Candidate,
    demand_sample_size,
    dominant_topic,
    emission_plan,
    next_phase,
    should_retrain,
    top_share_threshold,
)


@pytest.mark.parametrize(("phase", "nxt", "done"), [
    ("rl", "sample", False), ("sample", "spotcheck", False), ("spotcheck", "retrain", False),
    ("retrain", "emit", False), ("emit", "rl", True)])
def test_next_phase(phase: str, nxt: str, done: bool) -> None:
    assert next_phase(phase) == (nxt, done)


def test_unknown_phase() -> None:
    with pytest.raises(ValueError, match="unknown phase"):
        next_phase("nap")
    assert len(PHASES) == 5


@pytest.mark.parametrize(("fps", "min_fps", "alert", "expected"), [
    (0, 8, False, False), (7, 8, False, False), (8, 8, False, True), (0, 8, True, True), (100, 0, False, False)])
def test_should_retrain(fps: int, min_fps: int, alert: bool, expected: bool) -> None:
    assert should_retrain(fps, min_fps, alert) is expected


@pytest.mark.parametrize(("ready", "base", "cap", "expected"), [
    (0, 32, 128, 128),  # an empty queue: the whole cap
    (40, 32, 128, 88),  # a thin queue: the cap less what is ready
    (96, 32, 128, 32), (5_000, 32, 128, 32),  # enough ready: the base sample
    (0, 32, 32, 32), (0, 32, 0, 32),  # cap at or below base: demand off
    (-3, 32, 128, 128)])  # a negative count is read as empty
def test_demand_sample_size(ready: int, base: int, cap: int, expected: int) -> None:
    assert demand_sample_size(ready, base, cap) == expected


def C(i: int, p: float, topic: str = "a", in_band: bool | None = None) -> Candidate:
    return Candidate(i, p, topic, in_band)


def plan(cands: list[Candidate], **kw: object) -> list[int]:
    args: dict[str, object] = {"min_probability": 0.5, "max_topic_share": 1.0, "high_water_mark": 100,
                               "ready_now": 0}
    args.update(kw)
    return emission_plan(cands, **args)  # type: ignore[arg-type]


def test_verified_first_then_probability_out_of_band_never() -> None:
    cands = [C(1, 0.9), C(2, 0.2, in_band=True), C(3, 0.99, in_band=False), C(4, 0.4), C(5, 0.7)]
    assert plan(cands) == [2, 1, 5]


def test_topic_quota() -> None:
    cands = [C(i, 0.9 - i / 100, "mul") for i in range(6)] + [C(10, 0.6, "add"), C(11, 0.55, "sub")]
    # 8 eligible, share 0.25 → at most 2 per topic
    assert plan(cands, max_topic_share=0.25) == [0, 1, 10, 11]


def test_backpressure_and_paused_topics() -> None:
    cands = [C(i, 0.9, "t" + str(i % 2)) for i in range(10)]
    assert plan(cands, high_water_mark=100, ready_now=97) == [0, 1, 2]
    assert plan(cands, high_water_mark=100, ready_now=100) == []
    assert plan(cands, high_water_mark=100, ready_now=250) == []
    assert plan(cands, paused_topics=frozenset({"t0"})) == [1, 3, 5, 7, 9]


def test_dominant_topic() -> None:
    assert dominant_topic(["a", "b", "a", "a"]) == ("a", 0.75)
    assert dominant_topic([]) == (None, 0.0)


@pytest.mark.parametrize(("scores", "share", "bar"), [
    ([0.9, 0.8, 0.7, 0.6], 0.5, 0.8),  # the top half of four: two tasks, the lower of them sets the bar
    ([0.9, 0.8, 0.7, 0.6], 0.3, 0.8),  # a share rounds up to whole tasks (ceil(1.2) = 2)
    ([0.6, 0.9, 0.6, 0.6], 0.25, 0.9),  # unsorted input
    ([0.6, 0.9, 0.6, 0.6], 0.5, 0.6),  # ties at the bar all qualify (emission_plan compares with >=)
    ([0.9, 0.8], 1.0, 0.0),  # 1: off
    ([], 0.25, 0.0),  # nothing sampled: no bar from the share
])
def test_top_share_threshold(scores: list[float], share: float, bar: float) -> None:
    assert top_share_threshold(scores, share) == bar
