"""Prometheus metrics as production makes them: a real ``Driver`` (the tests' fake engine, real store,
in-process spot-checks and retrains) exporting into the registry the real API app serves, scraped
over HTTP at ``/metrics`` and compared with what the store holds — also across a crash and restart."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import MetricPoint, ProbeRow, QueueItem, RetrainJob, SolverTrial, TaskRow
from daemon.http.api import ApiContext, create_app
from daemon.loop.driver import Driver
from daemon.ops.metrics import PHASES, PropelMetrics, build_metrics
from testkit.driver import make_driver
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


class StepTimer:
    """A phase timer whose every phase lasts ``step`` seconds (no wall-clock read)."""

    def __init__(self, step: float = 0.25) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _attach(driver: Driver, metrics: PropelMetrics) -> Driver:
    driver.metrics, driver.timer = metrics, StepTimer()
    return driver


def scrape(store: Store, metrics: PropelMetrics) -> dict[str, float]:
    """``GET /metrics`` from the real API app on a real uvicorn server: sample name (+labels) → value."""
    app = create_app(ApiContext(store=store, run_name="drv", registry=metrics.registry))
    with serve_app(app) as url:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def store_truth(store: Store, run_id: int) -> dict[str, float]:
    """What the store holds: queue rows, solver trials, activated aux probes, phase-duration rows."""
    with store.session() as s:
        count = lambda q: float(s.execute(q).scalar_one())  # noqa: E731
        truth = {
            "emitted": count(select(func.count()).select_from(QueueItem).where(QueueItem.run_id == run_id)),
            "trials": count(select(func.count()).select_from(SolverTrial)
                            .join(TaskRow, TaskRow.id == SolverTrial.task_id).where(TaskRow.run_id == run_id)),
            "retrains": count(select(func.count()).select_from(RetrainJob).where(
                RetrainJob.run_id == run_id, RetrainJob.state == "done",
                RetrainJob.probe_id.in_(select(ProbeRow.id).where(ProbeRow.active | (ProbeRow.role == "aux"))))),
        }
        for phase in PHASES:
            rows = s.scalars(select(MetricPoint.value).where(MetricPoint.run_id == run_id,
                                                             MetricPoint.name == f"{phase}_seconds")).all()
            truth[f"{phase}_count"], truth[f"{phase}_sum"] = float(len(rows)), float(sum(rows))
    return truth


def assert_scrape_matches_store(scraped: dict[str, float], truth: dict[str, float], cycles: int) -> None:
    assert scraped["propel_tasks_emitted_total"] == truth["emitted"] > 0
    assert scraped["propel_solver_trials_total"] == truth["trials"] > 0
    assert scraped["propel_aux_retrains_total"] == truth["retrains"] > 0
    assert scraped["propel_cycles_total"] == cycles
    for phase in PHASES:
        label = f'{{phase="{phase}"}}'
        assert scraped[f"propel_phase_duration_seconds_count{label}"] == truth[f"{phase}_count"] > 0, phase
        assert scraped[f"propel_phase_duration_seconds_sum{label}"] == pytest.approx(truth[f"{phase}_sum"]), phase


def test_three_cycles_scraped_at_metrics_equal_the_store(store: Store, tmp_path: Path) -> None:
    driver, _ = make_driver(store, tmp_path)
    metrics = build_metrics()
    _attach(driver, metrics)
    for _ in range(15):
        driver.tick()
    truth = store_truth(store, driver.run_id)
    assert_scrape_matches_store(scrape(store, metrics), truth, cycles=3)
    assert truth["rl_count"] == 3 and truth["rl_sum"] == pytest.approx(0.75)


class Killed(BaseException):
    """A kill -9 stand-in: raised after a phase's writes, before its transition is saved."""


class DiesAfterDispatch:
    """The in-process spot-checker, killed right after its trials are written (once)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.solver_id, self.armed = inner, inner.solver_id, True  # type: ignore[attr-defined]

    def dispatch(self, task_ids: Sequence[int], k: int) -> None:
        self.inner.dispatch(task_ids, k)  # type: ignore[attr-defined]
        if self.armed:
            self.armed = False
            raise Killed


def test_counters_count_exactly_once_across_a_crash_and_restart(store: Store, tmp_path: Path) -> None:
    first, engine = make_driver(store, tmp_path)
    _attach(first, build_metrics())
    for _ in range(7):  # cycle 0, then rl and sample of cycle 1
        first.tick()
    first.spot = DiesAfterDispatch(first.spot)
    with pytest.raises(Killed):
        first.tick()  # spot-check phase of cycle 1: trials stored, transition not saved
    # restart: a fresh process (new registry) re-runs the spot-check phase and goes on to 3 cycles
    second = Driver(store, first.run_id, engine, first.spot, first.retrainer, first.s)
    metrics = build_metrics()
    _attach(second, metrics)
    assert second.state()[:2] == ("spotcheck", 1)
    while second.state()[1] < 3:
        second.tick()
    scraped, truth = scrape(store, metrics), store_truth(store, second.run_id)
    assert scraped["propel_tasks_emitted_total"] == truth["emitted"] > 0
    assert scraped["propel_solver_trials_total"] == truth["trials"] > 0
    assert scraped["propel_aux_retrains_total"] == truth["retrains"]
    assert second.state()[2].totals.solver_trials == truth["trials"]
    with store.session() as s:
        per_cycle = s.scalars(select(func.sum(MetricPoint.value)).where(MetricPoint.name == "solver_trials")).one()
    assert per_cycle == truth["trials"], "the per-phase deltas add up to the stored trials"


class LosesEverything:
    """A broker that accepts spot-checks which then never land (a lost message, a dead worker)."""

    solver_id = "synthetic:lost"

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def dispatch(self, task_ids: Sequence[int], k: int) -> None:
        self.sent.append(list(task_ids))


def test_late_spotchecks_are_sent_again_then_abandoned_and_counted(store: Store, tmp_path: Path) -> None:
    driver, _ = make_driver(store, tmp_path, spotcheck_deadline_s=600.0, spotcheck_redispatches=1)
    clock, lost, metrics = FakeClock(), LosesEverything(), build_metrics()
    driver.spot, driver.clock = lost, clock
    _attach(driver, metrics)
    while driver.state()[:2] != ("retrain", 0):
        driver.tick()
    first = lost.sent[0]
    assert sorted(driver.state()[2].spotcheck_pending) == sorted(first)
    clock.now += timedelta(seconds=601)
    while driver.state()[:2] != ("retrain", 1):
        driver.tick()
    state = driver.state()[2]
    assert set(first) <= set(lost.sent[1]), "past the deadline: sent again"
    assert state.totals.spotchecks_redispatched == len(first) and state.totals.spotchecks_abandoned == 0
    clock.now += timedelta(seconds=601)
    while driver.state()[:2] != ("retrain", 2):
        driver.tick()
    state = driver.state()[2]
    assert not set(first) & set(state.spotcheck_pending), "past the last deadline: abandoned"
    assert state.totals.spotchecks_abandoned >= len(first)
    scraped = scrape(store, metrics)
    assert scraped["propel_spotchecks_abandoned_total"] == state.totals.spotchecks_abandoned
    with store.session() as s:
        abandoned = repo.metric_history(s, driver.run_id, ["spotchecks_abandoned"])
    assert sum(m.value for m in abandoned) == state.totals.spotchecks_abandoned
