"""Spot-check budget pacing (#34): the token bucket as pure functions of an injected ``now`` (tables)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.loop import pacing
from daemon.loop.pacing import Bucket, Pace

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("pace", "capacity", "per_hour_refill"), [
    (Pace(512, 32, 32), 32, 480),  # the default: the hour's refill + a full bucket = the hourly budget
    (Pace(512, 32, 400), 256, 256),  # burst capped at half the budget
    (Pace(20, 20, 32), 10, 10),
    (Pace(0, 32, 32), 0, 0),  # a zero budget: nothing, ever
    (Pace(512, 32, None), 0, 512),  # unpaced
])
def test_capacity_and_rate(pace: Pace, capacity: int, per_hour_refill: int) -> None:
    assert pace.capacity == capacity
    assert pace.rate_per_s * 3600 == pytest.approx(per_hour_refill)


@pytest.mark.parametrize(("tokens", "elapsed_s", "after"), [
    (None, 0, 32.0),  # a new bucket starts full
    (0.0, 7.5, 1.0),  # 480 tasks/h = one per 7.5 s
    (0.0, 75, 10.0),
    (5.0, 10_000, 32.0),  # a long pause (or a daemon down for hours) refills only up to the capacity
    (40.0, 0, 32.0),  # a bucket from a larger burst is cut down to the new capacity
    (3.0, -60, 3.0),  # a clock that went back adds nothing
])
def test_refill(tokens: float | None, elapsed_s: float, after: float) -> None:
    pace = Pace(512, 32, 32)
    before = None if tokens is None else Bucket(tokens=tokens, updated_at=NOW - timedelta(seconds=elapsed_s))
    got = pacing.refill(before, pace, NOW, used_this_hour=7)
    assert got.tokens == pytest.approx(after)
    assert (got.updated_at, got.per_hour, got.burst, got.used_this_hour) == (NOW, 512, 32, 7)


@pytest.mark.parametrize(("pace", "tokens", "used", "allowed"), [
    (Pace(512, 32, 32), 32.0, 0, 32),  # full bucket: a whole cycle's cap
    (Pace(512, 8, 32), 32.0, 0, 8),  # the per-cycle cap holds
    (Pace(512, 32, 32), 1.99, 0, 1),  # whole tokens only
    (Pace(512, 32, 32), 0.4, 0, 0),
    (Pace(512, 32, 32), 32.0, 500, 12),  # the hourly hard cap holds
    (Pace(512, 32, 32), 32.0, 512, 0),
    (Pace(512, 32, None), 0.0, 500, 12),  # unpaced: the two caps only
    (Pace(512, 32, None), 0.0, 0, 32),
])
def test_allowance(pace: Pace, tokens: float, used: int, allowed: int) -> None:
    assert pacing.allowance(Bucket(tokens=tokens, updated_at=NOW), pace, used) == allowed


def test_an_hour_of_ten_second_cycles_spends_the_budget_evenly_and_never_past_the_cap() -> None:
    """360 cycles 10 s apart, every allowance spent: checks every cycle after the first burst, ≤ the hourly budget."""
    pace, bucket, spent = Pace(512, 32, 32), None, []
    for cycle in range(360):
        bucket = pacing.refill(bucket, pace, NOW + timedelta(seconds=10 * cycle), used_this_hour=sum(spent))
        n = pacing.allowance(bucket, pace, sum(spent))
        bucket = pacing.spend(bucket, n)
        spent.append(n)
    assert spent[0] == 32 and sum(spent) <= 512
    assert sum(spent) >= 500  # the whole budget is used, spread over the hour
    assert all(n >= 1 for n in spent[1:])  # no cycle without a spot-check (old behaviour: none after cycle 15)
    assert max(spent[1:]) <= 2


def test_spend_and_summary_say_the_pace_and_what_is_left() -> None:
    bucket = pacing.spend(pacing.refill(None, Pace(512, 32, 32), NOW, used_this_hour=100), 30)
    assert bucket.tokens == pytest.approx(2.0) and bucket.used_this_hour == 130
    assert pacing.spend(bucket, 5).tokens == 0.0
    info = pacing.summary(bucket, NOW + timedelta(seconds=3.75))  # half a token later
    assert info["paced"] and info["left_this_hour"] == 382 and info["tokens"] == pytest.approx(2.5)
    assert info["rate_per_min"] == pytest.approx(8.0) and info["next_task_in_s"] == pytest.approx(3.8, abs=0.1)
    line = pacing.describe(info)
    assert "8 tasks/min" in line and "burst 32" in line and "130/512 tasks used this hour" in line
    unpaced = pacing.summary(pacing.refill(None, Pace(512, 32, None), NOW, used_this_hour=5), NOW)
    assert not unpaced["paced"] and "unpaced" in pacing.describe(unpaced)
