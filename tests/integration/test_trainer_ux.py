"""What a trainer sees through the real API server and CLI (issue #36 item 3, #38 item 5): "not
followed" said once with the setting that changes it, every announced version in status, drift that
reads NaN until measured, and the served mix by solver (``/v1/tasks/stats``, ``propel tasks stats``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from curriculum.domains.arith import ArithDomain
from curriculum.store import queue, repo
from curriculum.store.db import Store
from daemon.cli.main import cli
from daemon.config import load_config
from daemon.http.api import ApiContext, create_app
from daemon.ops.metrics import PropelMetrics, build_metrics, export_gauges
from daemon.service.api_app import build_api_app
from daemon.service.settings import followed_solver_name
from propel_sdk.client import PropelClient
from testkit.messages import frontier_message
from testkit.seeding import seed
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
TOKEN = "t0k3n-ux"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FOLLOWED = "daemon-solver"


Api = tuple[str, Store, PropelMetrics]


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    metrics = build_metrics()
    ctx = ApiContext(store=store, run_name="api", token=TOKEN, registry=metrics.registry, followed=(FOLLOWED,))
    with serve_app(create_app(ctx)) as url:
        yield url, store, metrics


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def api_log() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("propel.api")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_not_followed_is_said_once_with_the_setting(api: Api, api_log: Lines) -> None:
    url, store, _ = api
    ids = seed(store, 2)
    with PropelClient(url, token=TOKEN) as client:
        first = client.announce("trl-policy", "step-50")
        again = client.announce("trl-policy", "step-100")
        ours = client.announce(FOLLOWED, "step-1")
        got = client.lease(n=2, lease_s=60, consumer="trainer")
        assert client.ack(got[0], solved=2, n=8, solver="trl-policy", version="step-100") == "acked"
        assert client.ack(got[1], solved=2, n=8, solver="acker-only", version=3) == "acked"
        status = client.status()
    assert len(ids) == 2
    assert first["followed"] is False and again["followed"] is False and ours["followed"] is True
    assert 'solver.name = "trl-policy"' in first["notice"] and repr(FOLLOWED) in first["notice"]
    assert "notice" not in ours
    cli_out = CliRunner().invoke(cli, ["solver", "announce", "trl-policy", "step-150", "--url", url],
                                 env={"PROPEL_API_TOKEN": TOKEN})
    assert cli_out.exit_code == 0 and 'note: solver \'trl-policy\' is not followed' in cli_out.stderr
    said = [line for line in api_log.lines if "is not followed" in line]
    assert len([x for x in said if "'trl-policy'" in x]) == 1  # two announces and an ack: one line
    assert len([x for x in said if "'acker-only'" in x]) == 1  # known only through an ack
    follow = status["following"]
    assert follow["followed"] == [FOLLOWED]
    assert [n["solver"] for n in follow["not_followed"]] == ["acker-only", "trl-policy"]  # once per name
    assert all('solver.name = "' in n["notice"] for n in follow["not_followed"])


def test_status_lists_every_announced_version_with_current_marked(api: Api) -> None:
    url, store, _ = api
    seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        task = client.lease(n=1, lease_s=60, consumer="trainer")[0]
        assert client.ack(task, solved=2, n=8, solver="pol", version="step-50") == "acked"
        client.announce("pol", "step-100")  # newly current, no labels yet
        status = client.status()
    rows = {r["version"]: r for r in status["frontier"]["versions"] if r["solver"] == "pol"}
    assert set(rows) == {"step-50", "step-100"}
    assert rows["step-100"]["current"] and rows["step-100"]["trainer_labels"] == 0
    assert not rows["step-50"]["current"] and rows["step-50"]["trainer_labels"] == 1
    assert rows["step-100"]["drift_score"] is None  # never measured: null, not 0


def _drift(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "propel_drift_score_ratio"]
    return float(family.samples[0].value)


def test_drift_gauge_reads_nan_until_measured(api: Api) -> None:
    url, _, metrics = api
    assert math.isnan(_drift(url))  # never measured: not 0.0 ("no drift")
    assert export_gauges(metrics, {"drift_score": 0.0}) == []  # a measured "no drift" reads 0.0
    assert _drift(url) == 0.0


def _queue_mix(store: Store) -> list[int]:
    """Five arith tasks: three for solver 'pol' (predicted 0.1, 0.5, 0.9), two for no solver."""
    domain = ArithDomain()
    exprs = [("1+2", "pol", 0.1), ("3*4-5", "pol", 0.5), ("12*34*56+7", "pol", 0.9), ("9-8", None, 0.3),
             ("2*2", None, 0.7)]
    tasks = [domain.check(domain.parse(e).task).task for e, _, _ in exprs]  # type: ignore[arg-type]
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "api", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", t.content_hash, t.text, True, t.payload) for t in tasks])
        rows = []
        for tid, t, (_, solver, p) in zip(ids, tasks, exprs, strict=True):
            msg = {**frontier_message(domain, t, tid, domain.topic(t)), "solver": solver, "predicted_in_band": p}
            rows.append((tid, run_id, domain.topic(t), msg))
        queue.enqueue(s, rows)
    return ids


def test_served_mix_by_solver_over_http_and_cli(api: Api) -> None:
    url, store, _ = api
    _queue_mix(store)
    with PropelClient(url, token=TOKEN) as client:
        assert len(client.lease(n=1, lease_s=60, consumer="t")) == 1
    body = httpx.get(f"{url}/v1/tasks/stats", headers=AUTH, timeout=30).json()
    assert body["tasks"] == 5
    pol, anyone = body["solvers"]
    assert (pol["solver"], pol["tasks"], anyone["solver"], anyone["tasks"]) == ("pol", 3, None, 2)
    assert pol["features"]["operators"] == {"1": 1, "2": 1, "3": 1}
    assert pol["features"]["operator kinds"] == {"add": 2, "mul": 2, "sub": 1}
    assert pol["features"]["answer digits"] == {"1": 2, "5": 1}  # 3, 7, 22855
    assert pol["topics"] == {"add:1": 1, "mul:2": 1, "mul:3": 1}
    q = pol["predicted_in_band"]
    assert (q["quantiles"]["min"], q["quantiles"]["p50"], q["quantiles"]["max"]) == (0.1, 0.5, 0.9)
    assert q["bins"] == {"0.0-0.2": 1, "0.2-0.4": 0, "0.4-0.6": 1, "0.6-0.8": 0, "0.8-1.0": 1}
    assert sum(pol["states"].values()) == 3 and sum(anyone["states"].values()) == 2
    assert pol["prompt_chars"]["min"] == len("Compute: 1+2\nAnswer with a single integer.")
    only = httpx.get(f"{url}/v1/tasks/stats", params={"solver": "pol", "state": "ready"}, headers=AUTH,
                     timeout=30).json()
    assert [(s["solver"], s["tasks"]) for s in only["solvers"]] == [("pol", pol["states"].get("ready", 0))]
    bad = httpx.get(f"{url}/v1/tasks/stats", params={"state": "gone"}, headers=AUTH, timeout=30)
    assert bad.status_code == 422 and "state" in bad.text
    assert httpx.get(f"{url}/v1/tasks/stats", timeout=30).status_code == 401
    out = CliRunner().invoke(cli, ["tasks", "stats", "--url", url], env={"PROPEL_API_TOKEN": TOKEN})
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "solver pol · 3 task(s)" in lines and all(len(line) <= 80 for line in lines)
    assert any(line.strip().startswith("operators: 1 1 (33%)") for line in lines)


def test_the_default_api_follows_the_first_trainer(store: Store) -> None:
    """``propel run`` / ``propel serve`` build the API from the config: the default embedded run (synthetic,
    no solver.name) follows the first trainer that announces; a second trainer is told so with the setting."""
    cfg = load_config(None)
    with serve_app(build_api_app(cfg, store, build_metrics())) as url, PropelClient(url) as client:
        before = client.status()["following"]
        got = client.announce("my-trainer", "step-1")
        other = client.announce("another-trainer", "step-1")
        status = client.status()["following"]
    assert before["followed"] == [followed_solver_name(cfg)] and before["trainer"] is False
    assert got["followed"] is True and "notice" not in got and "'my-trainer'" in got["following"]
    assert status["followed"] == ["my-trainer"] and status["trainer"] is True and "first_trainer" in status["why"]
    assert other["followed"] is False and "'my-trainer'" in other["notice"]
    assert 'solver.follow = "config" and solver.name = "another-trainer"' in other["notice"]
    assert [n["solver"] for n in status["not_followed"]] == ["another-trainer"]


def test_the_api_with_follow_config_follows_the_config_solver(store: Store) -> None:
    """``solver.follow = "config"`` keeps the configured solver whatever a trainer announces."""
    base = load_config(None)
    cfg = base.model_copy(update={"solver": base.solver.model_copy(update={"follow": "config"})})
    with serve_app(build_api_app(cfg, store, build_metrics())) as url, PropelClient(url) as client:
        got = client.announce("my-trainer", "step-1")
        status = client.status()
    daemon_name = followed_solver_name(cfg)
    assert daemon_name.startswith("synthetic:") and status["following"]["followed"] == [daemon_name]
    assert got["followed"] is False and repr(daemon_name) in got["notice"]
    assert 'solver.name = "my-trainer"' in got["notice"]
