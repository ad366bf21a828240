"""The degraded state on a real Driver and store: the solver budget runs out mid-run, the queue hits
its high-water mark, a retrain fails — each starts with one warning line, shows in the driver state
(hence /v1/status and /healthz), reaches the hook that exports ``propel_degraded{reason}``, and
ends with one line when it clears."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from curriculum.store.db import Store
from daemon.http.api import daemon_status
from daemon.loop import health
from daemon.loop.driver import DriverHooks
from daemon.ops.metrics import build_metrics, export_degraded
from testkit.driver import QueuedRetrainer, make_driver

pytestmark = pytest.mark.integration


class MetricHooks(DriverHooks):
    def __init__(self) -> None:
        self.metrics = build_metrics()
        self.calls: list[dict[str, Any]] = []

    def degraded(self, state: dict[str, dict[str, Any]]) -> None:
        self.calls.append(state)
        export_degraded(self.metrics, state, health.REASONS)

    def scrape(self) -> str:
        return generate_latest(self.metrics.registry).decode()


def _cycle(driver: Any) -> None:
    for _ in range(5):
        driver.tick()


def test_budget_exhaustion_is_said_once_and_shows_everywhere(sqlite_store: Store, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    driver, _ = make_driver(sqlite_store, tmp_path, budget_per_cycle=20, budget_per_hour=30,
                            retrain_min_false_positives=0)
    hooks = MetricHooks()
    driver.hooks = hooks
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        _cycle(driver)  # 20 of 30 spent
        _, _, state = driver.state()
        assert state.degraded == {}
        for _ in range(3):  # 30 of 30, then nothing left
            _cycle(driver)
    started = [r for r in caplog.records if r.getMessage().startswith(f"degraded: {health.BUDGET}")]
    assert len(started) == 1, [r.getMessage() for r in caplog.records]
    assert "30/30 tasks this hour" in started[0].getMessage() and "paused until" in started[0].getMessage()
    _, _, state = driver.state()
    entry = state.degraded[health.BUDGET]
    assert entry["until"] and entry["since"]
    status = daemon_status(sqlite_store, "drv")
    assert [d["reason"] for d in status["degraded"]] == [health.BUDGET]
    assert f'propel_degraded{{reason="{health.BUDGET}"}} 1.0' in hooks.scrape()
    assert f'propel_degraded{{reason="{health.BACKPRESSURE}"}} 0.0' in hooks.scrape()

    driver.s = type(driver.s)(**{**driver.s.__dict__, "budget_per_hour": 10_000})  # budget raised: it ends
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="propel.driver"):
        _cycle(driver)
    ended = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recovered:")]
    assert ended == [f"recovered: {health.BUDGET} (degraded since {entry['since']})"]
    assert driver.state()[2].degraded == {}
    assert f'propel_degraded{{reason="{health.BUDGET}"}} 0.0' in hooks.scrape()


def test_backpressure_and_a_failing_retrain(sqlite_store: Store, tmp_path: Path) -> None:
    retrainer = QueuedRetrainer()
    driver, _ = make_driver(sqlite_store, tmp_path, high_water_mark=5, retrainer=retrainer,
                            retrain_min_false_positives=1)
    for _ in range(2):
        _cycle(driver)
    _, _, state = driver.state()
    assert health.BACKPRESSURE in state.degraded, state.degraded
    assert "high-water mark 5" in state.degraded[health.BACKPRESSURE]["detail"]
    assert "propel tasks pull" in state.degraded[health.BACKPRESSURE]["detail"]  # names the fix
    from sqlalchemy import select

    from curriculum.store.models import MetricPoint

    with sqlite_store.session() as s:  # what the cycle summary reads to say "emitted 0 (queue full …)"
        last = dict(s.execute(select(MetricPoint.name, MetricPoint.value).where(MetricPoint.cycle == 1)).all())
    assert (last["emitted"], last["backpressure"], last["emission_paused"]) == (0.0, 1.0, 0.0)
    assert retrainer.specs, "a retrain job was submitted"
    from curriculum.probing.retrain import finish_job

    finish_job(sqlite_store, retrainer.specs[0].name, "failed", "worker ran out of memory")
    _cycle(driver)
    _, _, state = driver.state()
    assert health.RETRAIN in state.degraded
    assert "worker ran out of memory" in state.degraded[health.RETRAIN]["detail"]


def test_without_labels_past_the_grace_period_only_verified_tasks_are_emitted(sqlite_store: Store,
                                                                                tmp_path: Path) -> None:
    from sqlalchemy import select

    from curriculum.store.models import QueueItem

    driver, _ = make_driver(sqlite_store, tmp_path, budget_per_cycle=20, budget_per_hour=20,
                            retrain_min_false_positives=0, unverified_grace_s=0.0, emit_lookback_cycles=1)
    _cycle(driver)  # the whole hour's budget goes in cycle 0: labels stop, and the grace is zero
    _, _, state = driver.state()
    assert health.BUDGET in state.degraded
    with sqlite_store.session() as s:
        messages = [q.message for q in s.scalars(select(QueueItem))]
    assert messages, "verified in-band tasks are still emitted"
    assert all(m["spot_check"] is not None and m["spot_check"]["in_band"] is True for m in messages)


def test_within_the_grace_period_emission_goes_on_with_probe_predictions(sqlite_store: Store,
                                                                         tmp_path: Path) -> None:
    from sqlalchemy import select

    from curriculum.store.models import QueueItem

    driver, _ = make_driver(sqlite_store, tmp_path, budget_per_cycle=20, budget_per_hour=20,
                            retrain_min_false_positives=0, unverified_grace_s=3600.0, emit_lookback_cycles=1)
    _cycle(driver)
    _cycle(driver)  # cycle 1: no spot-check at all, its tasks go out on predictions
    with sqlite_store.session() as s:
        messages = [q.message for q in s.scalars(select(QueueItem))]
    assert any(m["spot_check"] is None for m in messages)


def test_a_retrain_nobody_picks_up_is_said(sqlite_store: Store, tmp_path: Path) -> None:
    retrainer = QueuedRetrainer()  # holds the job like a broker with no retrain worker
    driver, _ = make_driver(sqlite_store, tmp_path, retrainer=retrainer, retrain_min_false_positives=1,
                            worker_silence_s=0.0)
    _cycle(driver)
    assert retrainer.specs
    _, _, state = driver.state()
    entry = state.degraded[health.RETRAIN_WAITING]
    assert retrainer.specs[0].name in entry["detail"] and "propel worker -Q retrain" in entry["detail"]
