"""Sinks against real HTTP servers: webhook delivery, retries, dead webhooks; Prometheus exposition."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from daemon.ops.alerts.evaluation import AlertEvent, evaluate
from daemon.ops.alerts.rules import DEFAULT_RULES
from daemon.ops.alerts.sinks import LogSink, PrometheusSink, WebhookSink
from daemon.ops.metrics import PropelMetrics, build_metrics, export_gauges, export_totals, render
from testkit.servers import free_port, scripted_server
from testkit.waiting import eventually


def _fire_event(cycle: int = 3) -> AlertEvent:
    history = {c: {"top_topic_share": 0.9} for c in range(cycle + 1)}
    fires = [e for e in evaluate(DEFAULT_RULES, history, {}, topics={cycle: "+:1"}) if e.rule == "topic_collapse"]
    return fires[0]


def _wait_for(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    assert eventually(pred, timeout_s), "condition not reached in time"


def test_webhook_receiver_gets_the_alert_json() -> None:
    with scripted_server(lambda body, i: (200, {"ok": True})) as (url, seen):
        sink = WebhookSink(url, timeout_s=2.0)
        event = _fire_event()
        sink.emit(event, "run-a")
        _wait_for(lambda: len(seen) == 1)
        sink.close()
    body = seen[0]
    assert body["status"] == "firing" and body["run"] == "run-a" and body["rule"] == "topic_collapse"
    assert body["metric"] == "top_topic_share" and body["threshold"] == 0.5 and body["comparator"] == ">"
    assert body["severity"] == "critical" and body["cycle"] == 2 and body["value"] == pytest.approx(0.9)
    assert body["mitigation"] == {"kind": "retrain_aux_topic", "rule": "topic_collapse", "cycle": 2,
                                  "factor": None, "topic": None}
    assert body["schema_version"] == 1 and sink.delivered == 1


def test_webhook_retries_5xx_with_backoff_and_does_not_retry_4xx() -> None:
    def respond(body: dict[str, object], i: int) -> tuple[int, dict[str, object]]:
        if body["rule"] == "bad":
            return 400, {}
        return (503, {}) if i < 2 else (200, {})

    with scripted_server(respond) as (url, seen):
        sink = WebhookSink(url, timeout_s=2.0, max_retries=3, backoff_s=0.05)
        sink.emit(_fire_event(), "r")
        _wait_for(lambda: sink.delivered == 1)
        assert len(seen) == 3
        bad = AlertEvent("resolve", "bad", 9, 0.1, None)
        sink.emit(bad, "r")
        _wait_for(lambda: sink.failed == 1)
        sink.close()
    assert len(seen) == 4


@pytest.mark.parametrize("target", ["closed", "hanging"])
def test_dead_webhook_never_blocks_the_caller(target: str, hanging_url: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook" if target == "closed" else hanging_url
    sink = WebhookSink(url, timeout_s=0.3, max_retries=1, backoff_s=0.05, max_queue=4)
    event = _fire_event()
    with caplog.at_level(logging.WARNING, logger="propel.alerts"):
        for _ in range(50):
            sink.emit(event, "r")
    # emit never waited for the dead webhook: a waiting emit would have drained the queue, not dropped
    assert sink.dropped >= 50 - 4 - 1  # bounded queue (+ the one the worker holds)
    assert "queue full" in caplog.text
    sink.close(timeout_s=2.0)
    assert sink.delivered == 0


def test_alert_sinks_expose_propel_series_on_a_private_registry() -> None:
    metrics = build_metrics()
    PrometheusSink(metrics).emit(_fire_event(), "r")
    LogSink().emit(_fire_event(), "r")
    text = render(metrics)[0].decode()
    for name in ('propel_alerts_fired_total{rule="topic_collapse",severity="critical"} 1.0',
                 'propel_alert_active{rule="topic_collapse",severity="critical"} 1.0',
                 'propel_queue_depth{state="dead"} 0.0', 'propel_phase_duration_seconds_count{phase="rl"} 0.0',
                 "propel_tasks_emitted_total 0.0", "propel_validity_ratio 0.0"):
        assert name in text, name
    assert REGISTRY.get_sample_value("propel_alerts_fired_total", {"rule": "topic_collapse",
                                                                    "severity": "critical"}) is None
    assert render(metrics)[1].startswith("text/plain")


def test_totals_follow_the_saved_run_totals() -> None:
    """As the driver calls it after each saved phase: a repeated total adds nothing, a restarted
    process (fresh registry) starts at the stored total, a value that is not a total is ignored."""
    metrics = build_metrics()
    for saved in ({"emitted": 0, "solver_trials": 16}, {"emitted": 5, "solver_trials": 16},
                  {"emitted": 5, "solver_trials": 16}, {"emitted": 9, "solver_trials": 40, "unknown": 3}):
        export_totals(metrics, saved)
    assert _sample(metrics, "propel_tasks_emitted_total") == 9 and _sample(metrics, "propel_solver_trials_total") == 40
    restarted = build_metrics()
    export_totals(restarted, {"emitted": 9, "solver_trials": 40})
    assert _sample(restarted, "propel_tasks_emitted_total") == 9
    assert export_gauges(restarted, {"validity": 0.9, "queue_ready": 3, "emitted": 9}) == ["emitted"]
    assert _sample(restarted, "propel_validity_ratio") == 0.9
    assert _sample(restarted, "propel_queue_depth", state="ready") == 3


def _sample(metrics: PropelMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)
