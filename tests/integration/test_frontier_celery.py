"""The frontier follows the solver in distributed mode: after an announce, a real Celery worker process
(Redis broker, PostgreSQL store) attempts the spot-checks and the drift re-measurement under the new
version's id with the new checkpoint's skill, and trains the champion/challenger refresh of the primary
probe from the artifact store; the leader promotes it (hot swap) and retires the queue's stale tasks."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.frontier import drift
from curriculum.store import solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, RetrainJob, SolverTrial
from daemon.loop.driver import Driver
from daemon.loop.frontier import FrontierSettings
from daemon.service.retrainer import CeleryRetrainer
from daemon.service.spot import CelerySpotChecker
from testkit.driver import LeaderEngine, make_driver
from testkit.retrain_data import tiny_reference
from workers.local import start_worker, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RUN, NAME, VERSION = "fcel", "arith-policy", "step-100"


def _worker_config(path: Path, data_dir: Path, pg_url: str, redis_url: str) -> Path:
    """What a lab's worker host holds: the database and broker URLs, its solver endpoint's name and
    (synthetic here: a benchmark instrument) the skill each announced checkpoint serves."""
    path.write_text(f'run_name = "{RUN}"\ndata_dir = "{data_dir}"\n[store]\nurl = "{pg_url}"\n'
                    f'[broker]\nurl = "{redis_url}"\nvisibility_timeout_s = 60\ntask_time_limit_s = 50\n'
                    f'[solver]\nbackend = "synthetic"\nname = "{NAME}"\n'
                    f'synthetic_skill_by_version = {{ "{VERSION}" = 12.0 }}\n')
    return path


def _cycles(driver: Driver, n: int, worker_pace_s: float = 0.5) -> None:
    """``n`` whole cycles, giving the worker time between them (a real cycle lasts an RL chunk)."""
    target = driver.state()[1] + n
    while driver.state()[1] < target:
        driver.tick()
        if driver.state()[0] == "rl":
            time.sleep(worker_pace_s)


def _labels(store: Store, version: str) -> int:
    with store.session() as s:
        return int(s.execute(select(func.count()).select_from(Label).where(
            Label.solver_name == NAME, Label.solver_version == version)).scalar_one())


def _cycles_until(driver: Driver, done: Callable[[], bool], worker: subprocess.Popen[bytes], log: Path,
                  timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
        _cycles(driver, 1)


def _refreshes(store: Store) -> list[tuple[str, str, dict[str, object] | None]]:
    with store.session() as s:
        rows = s.execute(select(RetrainJob.state, RetrainJob.reason, RetrainJob.result).where(
            RetrainJob.name.like(f"{RUN}-primary-r%")).order_by(RetrainJob.id)).all()
    return [(r.state, r.reason or "", r.result) for r in rows]


def test_announce_is_remeasured_and_refreshed_by_a_celery_worker(tmp_path: Path, pg_store: Store, pg_url: str,
                                                                 redis_url: str) -> None:
    from daemon.config import config_from_mapping
    from daemon.service.settings import build_artifacts, worker_settings
    from workers import runtime
    from workers.app import configure_app

    daemon_dir, worker_dir = tmp_path / "daemon", tmp_path / "worker"
    worker_dir.mkdir(parents=True)
    leader_cfg = config_from_mapping({"run_name": RUN, "data_dir": str(daemon_dir), "store": {"url": pg_url},
                                      "broker": {"url": redis_url, "visibility_timeout_s": 60,
                                                 "task_time_limit_s": 50}}, env={})
    settings = worker_settings(leader_cfg)
    runtime.configure(settings)
    configure_app(settings)
    ref = tiny_reference(save_to=daemon_dir / "reference")
    frontier = FrontierSettings(drift_budget_share=0.5, drift_per_stratum=4, refresh_min_labels=16)
    driver, _ = make_driver(pg_store, daemon_dir, retrainer=CeleryRetrainer(RUN), frontier=frontier,
                            run_name=RUN, budget_per_cycle=16, budget_per_hour=10_000,
                            min_probability=0.45)
    driver.engine = LeaderEngine(build_artifacts(leader_cfg, pg_store), daemon_dir / "reference", ref.fingerprint)
    driver.spot = CelerySpotChecker(NAME, RUN, batch_size=4)
    log = worker_dir / "worker.log"
    worker = start_worker(_worker_config(worker_dir / "worker.toml", worker_dir, pg_url, redis_url), log,
                          concurrency=1, cwd=worker_dir)
    try:
        _cycles_until(driver, lambda: _labels(pg_store, "") >= 32, worker, log)  # the unversioned solver's
        with pg_store.session() as s:
            assert solver_versions.register(s, NAME, VERSION, source="announce").is_current  # POST /v1/solvers
        _cycles_until(driver, lambda: any(r[0] == "done" for r in _refreshes(pg_store)), worker, log)
        _cycles(driver, 1)  # the leader's next retrain phase promotes the challenger
    finally:
        stop(worker)
    with pg_store.session() as s:
        [m] = drift.measurements(s, driver.run_id, NAME)
        new_trials = s.execute(select(func.count()).select_from(SolverTrial).where(
            SolverTrial.solver_id == f"{NAME}@{VERSION}")).scalar_one()
        outcomes = s.scalars(select(SolverTrial.outcome).where(SolverTrial.solver_id == f"{NAME}@{VERSION}")).all()
    assert new_trials > 0, log.read_text()[-3000:]  # the worker attempted them under the announced version
    assert m.new_version == VERSION and m.measured >= 1 and m.score is not None and m.score > 0.3
    assert outcomes.count("pass") > len(outcomes) / 2  # the worker served the stronger checkpoint's skill
    done = [r for r in _refreshes(pg_store) if r[0] == "done"]
    assert done and done[0][2] is not None and "challenger" in done[0][2], _refreshes(pg_store)
    state = driver.state()[2]
    assert state.champion is not None and state.totals.primary_refreshes >= 1
