"""Spot-check budget pacing: a token bucket that spreads the hourly solver budget over the hour (#34).

Before pacing, the per-cycle cap (``spotcheck.budget_per_cycle``) spent the hourly budget
(``spotcheck.budget_per_hour``) within minutes (512 tasks by cycle 15 of the embedded default), and no
label arrived for the rest of the hour: false-positive mining, aux retraining and the emission gate's
verified labels all stopped while the generator went on learning against frozen probes.

The bucket holds up to ``capacity`` tokens (one token = one task spot-checked) and refills at
``(budget_per_hour − capacity) / 3600`` tokens a second, so that in any hour at most the capacity
plus one hour of refill — exactly ``budget_per_hour`` — can be spent. The hourly cap is therefore
never what stops spot-checks in normal operation (``solver_budget_exhausted`` fires only when
something else spends the same solver's budget); it stays as the hard cap, as does the per-cycle
cap. The capacity is ``spotcheck.burst``, at most half the hourly budget (so the refill rate stays
at least half of the budget's). A cycle may check ``min(⌊tokens⌋, per-cycle cap, hour left)``
tasks; the tasks it dispatches are taken from the bucket.

Pure functions of an injected ``now``; the bucket is stored in the driver's state, so a restarted
daemon keeps its pace (the time it was down refills the bucket, up to the capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from curriculum.labelling.spotcheck import budget_left


class Bucket(BaseModel):
    """The stored token bucket: tokens left at ``updated_at``, and the budget it was paced under then
    (so ``/v1/status`` can show the pace without the daemon's config)."""

    model_config = ConfigDict(extra="forbid")
    tokens: float = Field(ge=0)
    updated_at: datetime
    per_hour: int = 0
    per_cycle: int = 0
    burst: int | None = None
    used_this_hour: int = Field(0, description="tasks spot-checked in the hour before updated_at")


@dataclass(frozen=True)
class Pace:
    """The budget settings; ``burst`` None: no pacing (the per-cycle and hourly caps only)."""

    per_hour: int
    per_cycle: int
    burst: int | None = 32

    @property
    def capacity(self) -> int:
        """The bucket's size: ``burst``, at most half the hourly budget."""
        return max(0, min(self.burst or 0, self.per_hour // 2))

    @property
    def rate_per_s(self) -> float:
        """Tokens added per second: what the capacity leaves of the hourly budget, over the hour."""
        return max(0, self.per_hour - self.capacity) / 3600.0


def refill(bucket: Bucket | None, pace: Pace, now: datetime, used_this_hour: int = 0) -> Bucket:
    """The bucket at ``now``: a new one starts full; a clock that went back adds nothing."""
    if bucket is None:
        tokens = float(pace.capacity)
    else:
        elapsed = max(0.0, (now - bucket.updated_at).total_seconds())
        tokens = min(float(pace.capacity), bucket.tokens + elapsed * pace.rate_per_s)
    return Bucket(tokens=tokens, updated_at=now, per_hour=pace.per_hour, per_cycle=pace.per_cycle, burst=pace.burst,
                  used_this_hour=used_this_hour)


def allowance(bucket: Bucket, pace: Pace, used_this_hour: int) -> int:
    """Tasks this cycle may spot-check: the whole tokens, within the per-cycle cap and the hour's budget."""
    cap = budget_left(used_this_hour, pace.per_hour, pace.per_cycle)
    if pace.burst is None:
        return cap
    return min(cap, math.floor(bucket.tokens + 1e-9))


def spend(bucket: Bucket, tasks: int) -> Bucket:
    """The bucket after ``tasks`` were dispatched (never below empty; they count as used this hour)."""
    return bucket.model_copy(update={"tokens": max(0.0, bucket.tokens - tasks),
                                      "used_this_hour": bucket.used_this_hour + tasks})


def summary(bucket: Bucket, now: datetime) -> dict[str, Any]:
    """What ``/v1/status``, ``propel status`` and the dashboard show: the pace and what is left
    (tokens projected to ``now``; tasks used as of the last spot-check phase)."""
    pace, used_this_hour = Pace(bucket.per_hour, bucket.per_cycle, bucket.burst), bucket.used_this_hour
    current = refill(bucket, pace, now, used_this_hour) if pace.burst is not None else None
    out: dict[str, Any] = {"paced": pace.burst is not None, "budget_per_hour": pace.per_hour,
                           "budget_per_cycle": pace.per_cycle, "used_this_hour": used_this_hour,
                           "left_this_hour": max(0, pace.per_hour - used_this_hour)}
    if current is not None:
        rate = pace.rate_per_s
        missing = 1.0 - (current.tokens % 1.0) if current.tokens < pace.capacity else 0.0
        out |= {"tokens": round(current.tokens, 2), "burst": pace.capacity, "rate_per_min": round(rate * 60, 3),
                "next_task_in_s": round(missing / rate, 1) if rate > 0 and missing > 0 else 0.0}
    return out


def describe(info: dict[str, Any]) -> str:
    """One readable line of :func:`summary` (``propel status``, the dashboard)."""
    used = f"{info['used_this_hour']:,}/{info['budget_per_hour']:,} tasks used this hour"
    if not info.get("paced"):
        return f"spot-checks unpaced: up to {info['budget_per_cycle']:,} per cycle; {used}"
    return (f"spot-check pace {info['rate_per_min']:g} tasks/min (burst {info['burst']:,}, "
            f"≤ {info['budget_per_cycle']:,}/cycle): {info['tokens']:g} ready now, next in "
            f"{info['next_task_in_s']:g} s; {used}")
