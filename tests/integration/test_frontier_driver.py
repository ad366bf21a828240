"""The driver follows the solver: a new version announced mid-run is spot-checked under its own id,
a stratified sample of labelled tasks is re-measured within the drift budget share, and the drift
score lands in the store and the metrics (real store, real in-process spot-checks, synthetic solver)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from curriculum.frontier import drift
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, MetricPoint, RetrainJob, SolverTrial
from daemon.http.api import ApiContext, create_app
from daemon.loop.driver import Driver
from daemon.loop.frontier import FrontierSettings
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import DEFAULT_RULES
from daemon.ops.alerts.sinks import LogSink
from daemon.ops.metrics import build_metrics
from testkit.driver import make_driver
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


def _tick_to(driver: Driver, phase: str, cycle: int) -> None:
    while driver.state()[:2] != (phase, cycle):
        driver.tick()


def _solver(driver: Driver) -> SyntheticArithSolver:
    solver = driver.spot.solver  # type: ignore[attr-defined]
    assert isinstance(solver, SyntheticArithSolver)
    return solver


def test_announced_version_is_remeasured_within_budget_and_drift_is_scored(store: Store, tmp_path: Path) -> None:
    frontier = FrontierSettings(drift_budget_share=0.5, drift_per_stratum=4)
    driver, _ = make_driver(store, tmp_path, frontier=frontier, budget_per_cycle=12)
    driver.metrics = metrics_out = build_metrics()  # the Prometheus export, as the service wires it
    name = driver.spot.solver_id
    _tick_to(driver, "rl", 2)  # two cycles of labels under the unversioned solver
    with store.session() as s:
        assert solver_versions.current(s, name) is None
        old = s.execute(select(func.count()).select_from(Label).where(Label.solver_name == name,
                                                                      Label.solver_version == "")).scalar_one()
        got = solver_versions.register(s, name, "step-100", source="announce")  # what POST /v1/solvers does
    assert old >= 16 and got.is_current
    _solver(driver).set_skill(12.0)  # the new checkpoint is much stronger
    _tick_to(driver, "retrain", 2)
    with store.session() as s:
        [m] = drift.measurements(s, driver.run_id, name)
        new_trials = s.execute(select(func.count(func.distinct(SolverTrial.task_id))).where(
            SolverTrial.solver_id == f"{name}@step-100")).scalar_one()
        metrics = dict(s.execute(select(MetricPoint.name, MetricPoint.value).where(
            MetricPoint.run_id == driver.run_id, MetricPoint.cycle == 2)).all())
    assert (m.old_version, m.new_version, m.cycle) == ("", "step-100", 2)
    assert 0 < len(m.sample) <= 12 and set(m.sample.values()) <= set(drift.STRATA)
    assert metrics["drift_remeasured"] == 6  # half of the 12-task budget went to re-measurement
    assert metrics["spotcheck_dispatched"] <= 12 and new_trials <= 12
    for _ in range(4):
        _tick_to(driver, "retrain", driver.state()[1] + 1)
    with store.session() as s:
        [m] = drift.measurements(s, driver.run_id, name)
        relabelled = s.execute(select(func.count()).select_from(Label).where(
            Label.task_id.in_(list(m.sample)), Label.solver_version == "step-100")).scalar_one()
        scores = [v for (v,) in s.execute(select(MetricPoint.value).where(MetricPoint.name == "drift_score"))]
    assert m.state == "done" and relabelled == len(m.sample) and m.measured >= 1
    assert m.matrix["in_band"]["too_easy"] >= 1 and m.score is not None and m.score > 0.3  # a stronger solver
    assert scores and scores[-1] == pytest.approx(m.score)
    with store.session() as s:  # the drift above frontier.refresh_drift_threshold started a primary refresh
        refreshes = s.execute(select(RetrainJob.state, RetrainJob.reason, RetrainJob.result).where(
            RetrainJob.name.like("drv-primary-r%")).order_by(RetrainJob.id)).all()
    assert refreshes and all(r.state in ("done", "skipped") for r in refreshes), refreshes
    # one drift trigger: a refresh skipped for want of data is tried again as labels arrive, none after a done one
    assert all(r.state == "skipped" for r in refreshes[:-1]), refreshes
    ctx = ApiContext(store=store, run_name="drv", registry=metrics_out.registry)
    with serve_app(create_app(ctx)) as url:  # the operator's view: /v1/status and a real /metrics scrape
        status = httpx.get(f"{url}/v1/status").json()
        metrics = httpx.get(f"{url}/metrics").text
    rows = {r["version"]: r for r in status["frontier"]["versions"]}
    assert rows["step-100"]["current"] and rows["step-100"]["drift_score"] == pytest.approx(m.score)
    assert rows["step-100"]["spotcheck_labels"] > 0 and rows[""]["age"] == 1 and not rows[""]["current"]
    assert rows["step-100"]["transitions"]["in_band"]["too_easy"] == m.matrix["in_band"]["too_easy"]
    [line] = [x for x in metrics.splitlines() if x.startswith("propel_drift_score_ratio ")]
    assert float(line.split()[1]) == pytest.approx(m.score)
    [line] = [x for x in metrics.splitlines() if x.startswith("propel_drift_remeasured_total ")]
    assert float(line.split()[1]) == driver.state()[2].totals.drift_remeasured >= 6  # the run total, exported


def test_unversioned_run_never_opens_a_measurement(store: Store, tmp_path: Path) -> None:
    driver, _ = make_driver(store, tmp_path)
    _tick_to(driver, "rl", 2)
    with store.session() as s:
        assert drift.measurements(s, driver.run_id) == []
        versions = {r for (r,) in s.execute(select(SolverTrial.solver_version).distinct())}
    assert versions == {""}


def test_a_newer_announce_closes_the_open_measurement_with_what_it_measured(store: Store, tmp_path: Path) -> None:
    """Trainers announce faster than a measurement finishes: the superseded one closes (scored on the
    transitions measured so far) instead of waiting out drift_max_cycles, and the newest opens."""
    frontier = FrontierSettings(drift_budget_share=0.25, drift_per_stratum=8)
    driver, _ = make_driver(store, tmp_path, frontier=frontier, budget_per_cycle=12)
    name = driver.spot.solver_id
    _tick_to(driver, "rl", 2)
    with store.session() as s:
        solver_versions.register(s, name, "step-100", source="announce")
    _solver(driver).set_skill(12.0)
    _tick_to(driver, "retrain", 3)  # two cycles of 3 re-measurements: the sample (up to 24) is not done
    with store.session() as s:
        [first] = drift.measurements(s, driver.run_id, name)
        solver_versions.register(s, name, "step-200", source="announce")
    assert first.state == "measuring" and 0 < first.measured < len(first.sample)
    _tick_to(driver, "retrain", 4)
    with store.session() as s:
        got = drift.measurements(s, driver.run_id, name)
    assert [(m.new_version, m.state) for m in got] == [("step-100", "done"), ("step-200", "measuring")]
    assert got[0].measured >= first.measured and got[0].score is not None


def test_the_drift_alert_waits_for_a_finished_measurement(store: Store, tmp_path: Path) -> None:
    """A measurement re-measures its sample over several cycles (formerly in-band tasks first); until it is
    done no ``drift_score`` is recorded, so ``frontier_drift`` cannot fire on the first one or two tasks (#37)."""
    frontier = FrontierSettings(drift_budget_share=0.25, drift_per_stratum=4)
    driver, _ = make_driver(store, tmp_path, frontier=frontier, budget_per_cycle=12)
    name = driver.spot.solver_id
    _tick_to(driver, "rl", 2)
    with store.session() as s:
        solver_versions.register(s, name, "step-100", source="announce")
    _solver(driver).set_skill(12.0)
    manager = AlertManager(store, driver.run_id, "drv", DEFAULT_RULES, [LogSink()])
    seen = []
    for cycle in range(2, 9):
        _tick_to(driver, "rl", cycle + 1)
        with store.session() as s:
            [m] = drift.measurements(s, driver.run_id, name)
            values = dict(s.execute(select(MetricPoint.name, MetricPoint.value).where(
                MetricPoint.run_id == driver.run_id, MetricPoint.cycle == cycle)).all())
        fired = manager.on_cycle(cycle, values).fired
        seen.append((cycle, m.state, m.measured, "drift_score" in values, [a.rule for a in fired]))
        if m.state == "measuring":
            assert "drift_score" not in values and "frontier_drift" not in [a.rule for a in fired], seen
    assert any(state == "measuring" and measured > 0 for _, state, measured, _, _ in seen), seen  # partial first
    assert m.state == "done" and m.score is not None and m.score > 0.3, seen
    assert any(has and "frontier_drift" in rules for _, _, _, has, rules in seen), seen  # fires once it is done


class _NeverLands:
    """A broker whose spot-checks never land; it records the version each batch was sent to."""

    solver_id = "synthetic:lost"

    def __init__(self) -> None:
        self.sent: list[tuple[str | None, list[int]]] = []

    def dispatch(self, task_ids: Sequence[int], k: int, solver_id: str | None = None) -> None:
        self.sent.append((solver_id, list(task_ids)))


def test_a_check_sent_again_after_an_announce_goes_to_the_version_served(store: Store, tmp_path: Path) -> None:
    """A check past its deadline is sent again; after an announce the endpoint serves the new checkpoint, so
    the check (and the label harvested from it) moves to that version instead of recording the new
    checkpoint's attempts under the old one (#37)."""
    driver, _ = make_driver(store, tmp_path, spotcheck_deadline_s=600.0, spotcheck_redispatches=2)
    now = [datetime(2026, 11, 23, 12, 0, tzinfo=UTC)]
    lost, driver.clock = _NeverLands(), lambda: now[0]
    driver.spot = lost
    with store.session() as s:
        solver_versions.register(s, lost.solver_id, "step-1")
    _tick_to(driver, "retrain", 0)
    (sid, first), = lost.sent
    assert sid == f"{lost.solver_id}@step-1"
    with store.session() as s:
        solver_versions.register(s, lost.solver_id, "step-2")
    now[0] += timedelta(seconds=601)
    _tick_to(driver, "retrain", 1)
    again = {t: v for v, ids in lost.sent[1:] for t in ids if t in first}
    pending = driver.state()[2].spotcheck_pending
    assert set(again) == set(first) and set(again.values()) == {f"{lost.solver_id}@step-2"}
    assert {pending[t].solver_id for t in first} == {f"{lost.solver_id}@step-2"}  # harvested under it too
