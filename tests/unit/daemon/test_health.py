"""The degraded state and liveness as pure functions (tables, injected ``now``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.loop import health
from daemon.loop.phases import Candidate, emission_plan

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_budget_exhausted_says_until_when() -> None:
    assert health.budget_exhausted(511, 512, NOW) is None
    assert health.budget_exhausted(0, 0, None) is None  # a zero budget is a choice, not a degradation
    d = health.budget_exhausted(512, 512, NOW - timedelta(minutes=20))
    assert d is not None and d.reason == health.BUDGET
    assert d.until == (NOW + timedelta(minutes=40)).isoformat(timespec="seconds")
    assert "512/512" in d.detail and "until 12:40:00 UTC" in d.detail and "emission continues" in d.detail


@pytest.mark.parametrize(("pending", "since_s", "last_trial_s", "degraded"), [
    (0, 9999, None, False),  # nothing pending
    (5, 100, None, False),  # pending, but not for long
    (5, 900, None, True),  # pending 15 min, no trial ever
    (5, 900, 60, False),  # trials are landing
    (5, 900, 700, True),  # the last trial is older than the silence limit
])
def test_workers_silent(pending: int, since_s: float, last_trial_s: float | None, degraded: bool) -> None:
    last = NOW - timedelta(seconds=last_trial_s) if last_trial_s is not None else None
    d = health.workers_silent(pending, NOW - timedelta(seconds=since_s), last, NOW, silence_s=600)
    assert (d is not None) == degraded
    if d is not None:
        assert "propel worker" in d.detail


def test_merge_reports_start_and_end_once_and_keeps_since() -> None:
    bp = health.backpressure(10_000, 10_000)
    state, started, ended = health.merge({}, {health.BACKPRESSURE: bp}, NOW)
    assert [d.reason for d in started] == [health.BACKPRESSURE] and ended == []
    later = NOW + timedelta(minutes=5)
    state2, started2, ended2 = health.merge(state, {health.BACKPRESSURE: health.backpressure(10_500, 10_000),
                                                    health.RETRAIN: None}, later)
    assert started2 == [] and ended2 == []  # still on: no new line
    assert state2[health.BACKPRESSURE]["since"] == NOW.isoformat(timespec="seconds")
    assert "10,500" in state2[health.BACKPRESSURE]["detail"]
    state3, started3, ended3 = health.merge(state2, {health.BACKPRESSURE: None}, later)
    assert state3 == {} and started3 == [] and [d.reason for d in ended3] == [health.BACKPRESSURE]


def test_emission_without_labels_continues_for_the_grace_period_only() -> None:
    state, _, _ = health.merge({}, {health.BUDGET: health.budget_exhausted(8, 8, NOW)}, NOW)
    assert not health.verified_only(state, NOW + timedelta(minutes=59), grace_s=3600)
    assert health.verified_only(state, NOW + timedelta(minutes=61), grace_s=3600)
    backpressure_only, _, _ = health.merge({}, {health.BACKPRESSURE: health.backpressure(5, 1)}, NOW)
    assert not health.verified_only(backpressure_only, NOW + timedelta(days=1), grace_s=3600)
    cands = [Candidate(1, 0.9, "a"), Candidate(2, 0.6, "b", in_band=True), Candidate(3, 0.8, "c", in_band=False)]
    common = {"min_probability": 0.5, "max_topic_share": 1.0, "high_water_mark": 100, "ready_now": 0}
    assert emission_plan(cands, **common) == [2, 1]
    assert emission_plan(cands, **common, verified_only=True) == [2]


def test_summary_orders_reasons() -> None:
    state, _, _ = health.merge({}, {health.BACKPRESSURE: health.backpressure(2, 1),
                                    health.RETRAIN: health.retrain_failing(2, "worker died")}, NOW)
    rows = health.summary(state)
    assert [r["reason"] for r in rows] == [health.RETRAIN, health.BACKPRESSURE]
    assert "2 aux-probe retrain(s) in a row failed (last: worker died)" in rows[0]["detail"]


@pytest.mark.parametrize(("beat_s", "leader", "lease_s", "problems"), [
    (1, "h:1", 20, []),
    (None, None, None, ["no heartbeat", "no leader"]),
    (45, "h:1", None, ["last heartbeat 45 s ago (limit 30 s)"]),
    (1, None, None, ["no leader"]),
    (1, "h:1", -5, ["lease expired"]),
])
def test_liveness(beat_s: float | None, leader: str | None, lease_s: float | None, problems: list[str]) -> None:
    beat = NOW - timedelta(seconds=beat_s) if beat_s is not None else None
    lease = NOW + timedelta(seconds=lease_s) if lease_s is not None else None
    got = health.liveness(beat, leader, lease, NOW, stale_s=30)
    assert len(got) == len(problems)
    for text, expected in zip(got, problems, strict=True):
        assert expected in text


def test_retrain_waiting() -> None:
    assert health.retrain_waiting(None, None, 600) is None
    assert health.retrain_waiting("job", 599, 600) is None
    d = health.retrain_waiting("job", 601, 600)
    assert d is not None and d.reason == health.RETRAIN_WAITING and "601 s" in d.detail
