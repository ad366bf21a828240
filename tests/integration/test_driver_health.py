"""Always-on health through the real driver and store (#34): the spot-check budget is paced over the
window and survives a restart."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from curriculum.store.db import Store
from daemon.http.run_status import daemon_status
from daemon.loop import health
from daemon.loop.driver import Driver
from testkit.driver import make_driver

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Clock:
    """The driver's injected ``now``, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _dispatched_in_cycle(driver: Driver) -> float:
    """Tick one whole cycle; the spot-check phase's dispatch count."""
    got = 0.0
    for _ in range(5):
        report = driver.tick()
        if report.phase == "spotcheck":
            got = report.values["spotcheck_dispatched"]
    return got


def _restarted(driver: Driver, clock: Callable[[], datetime]) -> Driver:
    """A new driver on the same store and run, as a restarted daemon builds it (state read from the store)."""
    return Driver(driver.store, driver.run_id, driver.engine, driver.spot, driver.retrainer, driver.s, clock=clock)


def test_the_budget_is_paced_over_the_window_and_the_pace_survives_a_restart(store: Store, tmp_path: Path) -> None:
    # burst 6; 3,606 tasks/hour: the bucket refills one task a second (the per-cycle cap of 20 never binds)
    driver, _ = make_driver(store, tmp_path, budget_per_cycle=20, budget_per_hour=3_606, spot_burst=6,
                            retrain_min_false_positives=10**6)
    clock = Clock()
    driver.clock = clock
    assert _dispatched_in_cycle(driver) == 6  # a full bucket
    clock.now += timedelta(seconds=3)
    assert _dispatched_in_cycle(driver) == 3  # three seconds of refill
    clock.now += timedelta(seconds=0.5)
    assert _dispatched_in_cycle(driver) == 0  # half a token: nothing this cycle …
    driver = _restarted(driver, clock)
    clock.now += timedelta(seconds=1.5)
    assert _dispatched_in_cycle(driver) == 2  # … and the half is kept across the restart
    _, _, state = driver.state()
    assert state.spot_bucket is not None and state.spot_bucket.tokens == pytest.approx(0.0)
    assert health.BUDGET not in state.degraded
    pace = daemon_status(store, "drv", frontier=False)["spotcheck_pace"]
    assert pace["paced"] and pace["burst"] == 6 and pace["rate_per_min"] == pytest.approx(60.0)
    assert pace["used_this_hour"] == 11 and "11/3,606 tasks used this hour" in pace["line"]

