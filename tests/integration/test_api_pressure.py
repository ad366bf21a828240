"""``api.yield_to_api`` end to end on the HTTP side: the API app ``propel run`` builds (``build_api_app``
with its ``ApiPressure``), served by a real uvicorn server, marks every queue request, and the training
gate then holds; status and health requests, and leases that find nothing (a trainer polling an empty
queue), do not count."""

from __future__ import annotations

import httpx
import pytest

from curriculum.store.db import Store
from daemon.config import PropelConfig
from daemon.http.pressure import ApiPressure
from daemon.ops.metrics import build_metrics
from daemon.service.api_app import build_api_app
from daemon.service.runtime import build_gate
from daemon.service.yielding import YieldGate
from propel_sdk.client import PropelClient
from testkit.seeding import seed
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


def test_queue_requests_mark_pressure_and_the_gate_holds(store: Store) -> None:
    # idle only after a minute without a queue request: a request in this test keeps the API "busy",
    # so the gate holds until its max_hold_s (0.2 s) ends the hold
    cfg = PropelConfig.model_validate({"run_name": "api", "api": {"yield_idle_ms": 60_000, "yield_max_s": 0.2}})
    pressure, metrics = ApiPressure(), build_metrics()
    gate = build_gate(cfg, pressure, metrics)
    assert isinstance(gate, YieldGate)
    with serve_app(build_api_app(cfg, store, metrics, pressure=pressure)) as url, PropelClient(url) as client:
        assert client.lease(n=4, consumer="trainer") == []  # no run yet
        [task_id] = seed(store, 1)
        assert httpx.get(f"{url}/v1/status").status_code == 200
        assert httpx.get(f"{url}/healthz").status_code in (200, 503)
        assert pressure.requests == 0 and gate.wait() == 0.0  # no queue request with work yet: the training runs
        [task] = client.lease(n=4, lease_s=60, consumer="trainer")
        assert client.ack(task, solved=1, n=8, solver="pol@1") == "acked"
        assert client.lease(n=4, consumer="trainer") == []  # the queue is empty now: a poll, not pressure
        assert pressure.requests == 2 and pressure.idle_for() < 60
        held = gate.wait()
    assert held >= cfg.api.yield_max_s and gate.holds == 1  # held until released by yield_max_s
    assert metrics.registry.get_sample_value("propel_work_yielded_seconds_total") == pytest.approx(held)
    assert task.id == task_id


def test_refused_queue_requests_do_not_hold_the_training(store: Store) -> None:
    # with a token set, a client without it (401), a malformed lease (422) and an ack of an unknown task
    # (404) are all refused: none of them may throttle the training, whoever sends them
    cfg = PropelConfig.model_validate({"run_name": "api", "api": {"token": "s3cret", "yield_idle_ms": 60_000,
                                                                  "yield_max_s": 0.2}})
    pressure, metrics = ApiPressure(), build_metrics()
    gate = build_gate(cfg, pressure, metrics)
    seed(store, 2)
    with serve_app(build_api_app(cfg, store, metrics, pressure=pressure)) as url:
        auth = {"Authorization": "Bearer s3cret"}
        refused = [httpx.post(f"{url}/v1/tasks/lease", json={"n": 1, "consumer": "x"}),
                   httpx.post(f"{url}/v1/tasks/lease", json={"n": "many"}, headers=auth),
                   httpx.post(f"{url}/v1/tasks/999999/ack", headers=auth,
                              json={"solved": 1, "n": 8, "solver": "s", "lease_token": "t" * 32})]
        assert [r.status_code for r in refused] == [401, 422, 404]
        assert pressure.requests == 0 and gate.wait() == 0.0  # the training was not held
        with PropelClient(url, token="s3cret") as client:  # the same queue, used as allowed, does count
            assert len(client.lease(n=1, lease_s=60, consumer="trainer")) == 1
    assert pressure.requests == 1 and gate.wait() > 0
