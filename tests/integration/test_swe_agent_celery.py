"""The ``swe-agent`` solver on a real Celery worker (``propel worker`` on Redis, PostgreSQL store):
the worker builds the agent solver from the same config as the daemon, checks its endpoint at start,
runs each trial as an agent episode against the scripted model server in this process, and writes
the trials and their turns to the store; a worker whose endpoint does not answer exits 2 at start.
The worker has a repository cache of its own (as on another host: fetched, with no task memo of the
daemon's); the spot-check hands the solver the tasks behind its prompts."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.domains.base import get_domain
from curriculum.domains.swe.domain import SweDomain
from curriculum.store import trajectories
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from daemon.config import load_config
from daemon.service.settings import worker_settings
from testkit.servers import free_port, scripted_server
from tests.integration.test_swe_agent_backends import SPECS, Model, _toml, stored_tasks, swe_options
from workers import runtime
from workers.app import configure_app
from workers.local import start_worker, stop
from workers.tasks import dispatch_spotchecks

pytestmark = pytest.mark.integration


def _config(tmp: Path, options: dict[str, object], url: str, pg_url: str, broker: str) -> Path:
    path = tmp / "worker.toml"
    path.write_text(_toml({"run_name": f"sa{uuid.uuid4().hex[:8]}", "data_dir": str(tmp / "data"),
                           "store": {"url": pg_url}, "broker": {"url": broker},
                           "domain": {"name": "swe", "options": options},
                           "solver": {"backend": "swe-agent", "base_url": url, "model": "m",
                                      "agent": {"max_steps": 4, "wall_s": 120.0}}}))
    return path


def _wait(store: Store, n: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with store.session() as s:
            if s.execute(select(func.count()).select_from(SolverTrial)).scalar_one() >= n:
                return
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"fewer than {n} trials after {timeout_s} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.long  # a worker start + 5 sandboxed suite runs: ~12 s here
def test_a_celery_worker_runs_swe_agent_trials(tmp_path: Path, pg_store: Store, pg_url: str, redis_url: str) -> None:
    options = swe_options(tmp_path)
    domain = get_domain("swe", **options)
    assert isinstance(domain, SweDomain)
    ids = stored_tasks(pg_store, domain)
    model = Model({domain.parse(spec).task.content_hash[:16]: name for name, spec in SPECS.items()})  # type: ignore[union-attr]
    log = tmp_path / "worker.log"
    (tmp_path / "worker-host").mkdir()
    worker_options = swe_options(tmp_path / "worker-host")  # another host's `propel swe fetch`
    assert not (Path(str(worker_options["cache_dir"])) / "tasks").exists()  # no task memo there
    with scripted_server(model, models=["m"]) as (url, _):
        cfg = _config(tmp_path, worker_options, url, pg_url, redis_url)
        worker = start_worker(cfg, log, concurrency=2, queues="spotcheck")
        try:
            settings = worker_settings(load_config(cfg))
            runtime.configure(settings)
            configure_app(settings)
            dispatch_spotchecks([ids["solved"], ids["unsolved"]], 3, "agent:m", settings.run_name, batch_size=1)
            _wait(pg_store, 6, worker, log)
        finally:
            stop(worker)
    with pg_store.session() as s:
        rows = s.scalars(select(SolverTrial)).all()
        outcomes = {tid: sorted(r.outcome for r in rows if r.task_id == tid) for tid in ids.values()}
        reasons = sorted(str(r.reason) for r in rows if r.task_id == ids["unsolved"])
        solved_turns = trajectories.episode_turns(s, ids["solved"], "solver", "agent:m", 0)
    assert outcomes[ids["solved"]] == ["pass"] * 3
    assert outcomes[ids["unsolved"]] == ["fail", "fail", "null"]
    assert reasons[0].startswith("api_error: HTTP 500") and reasons[1:] == ["stop", "stop"]
    assert len(solved_turns) == 2 and solved_turns[0]["tool_results"] == ["edited minicalc/core.py"]


def test_a_worker_whose_agent_endpoint_is_down_exits_2(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg = _config(tmp_path, {"cache_dir": str(tmp_path / "none")}, dead, pg_url, redis_url)
    proc = subprocess.run([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "worker", "-Q", "spotcheck"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"solver.base_url: nothing answers at {dead}" in proc.stderr and "Traceback" not in proc.stderr
