"""Alerts against a real store (SQLite and PostgreSQL): live manager == replay; CLI; dead webhooks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.cli.alerts import alerts
from daemon.ops.alerts.manager import AlertManager, CycleAlerts
from daemon.ops.alerts.rules import DEFAULT_RULES, MitigationKind
from daemon.ops.alerts.sinks import AlertSink, LogSink, PrometheusSink, WebhookSink
from daemon.ops.metrics import build_metrics, render
from daemon.ops.replay import replay
from testkit.servers import scripted_server

pytestmark = pytest.mark.integration


def _collapse_history(n: int = 24) -> dict[int, dict[str, float]]:
    """Healthy, then collapsing (topic share up, Distinct-3/validity/precision down), repaired, relapsing."""
    out = {}
    for c in range(n):
        bad = 6 <= c < 13 or c >= 19
        out[c] = {"top_topic_share": 0.7 if bad else 0.2, "distinct3": 0.3 if bad else 0.7,
                  "validity": 0.4 if 8 <= c < 11 else 0.95, "probe_precision": 0.2 if bad else 0.6,
                  "emitted": 10.0}
        if c % 5 != 4:  # some cycles leave the text metric out (short sample)
            out[c]["self_bleu3"] = 0.9 if bad else 0.6
    return out


def _run_live(store: Store, run: str, history: dict[int, dict[str, float]], restart_at: int | None = None,
              sinks: list[AlertSink] | None = None) -> list[CycleAlerts]:
    with store.session() as sess:
        run_id = repo.get_or_create_run(sess, run, "h", {})
    manager = AlertManager(store, run_id, run, DEFAULT_RULES, sinks or [LogSink()])
    results = []
    for cycle, values in sorted(history.items()):
        if cycle == restart_at:  # a restarted daemon reloads the history from the store
            manager = AlertManager(store, run_id, run, DEFAULT_RULES, sinks or [LogSink()])
        with store.session() as sess:
            repo.record_metrics(sess, run_id, cycle, values)
        results.append(manager.on_cycle(cycle, values, dominant_topic="+:1"))
    return results


def test_replay_equals_what_the_live_manager_fired(store: Store) -> None:
    results = _run_live(store, "live", _collapse_history(), restart_at=9)
    result = replay(store, "live", DEFAULT_RULES)
    assert result.matches_stored() == {r.name: True for r in DEFAULT_RULES}
    assert sorted(i.key for i in result.replayed) == sorted(i.key for i in result.stored)
    keys = {i.key for i in result.stored}
    assert ("topic_collapse", 8, 13) in keys and ("topic_collapse", 21, None) in keys
    assert ("validity_low", 9, 11) in keys
    mitigations = [m for r in results for m in r.mitigations]
    collapse = [m for m in mitigations if m.rule == "topic_collapse"]
    assert [m.cycle for m in collapse] == [8, 21]
    assert collapse[0].kind is MitigationKind.RETRAIN_AUX_TOPIC and collapse[0].topic == "+:1"
    with store.session() as sess:
        run_id = repo.get_or_create_run(sess, "live", "h", {})
        open_rules = {a.rule for a in repo.open_alerts(sess, run_id)}
    assert open_rules == {i.rule for i in result.stored if i.cycle_resolved is None}


def test_re_running_a_cycle_does_not_fire_twice(sqlite_store: Store) -> None:
    history = _collapse_history(10)
    _run_live(sqlite_store, "again", history)
    before = replay(sqlite_store, "again", DEFAULT_RULES).stored
    with sqlite_store.session() as sess:
        run_id = repo.get_or_create_run(sess, "again", "h", {})
    manager = AlertManager(sqlite_store, run_id, "again", DEFAULT_RULES)
    again = manager.on_cycle(9, history[9])
    assert again.fired == [] and again.resolved == []
    assert replay(sqlite_store, "again", DEFAULT_RULES).stored == before


def test_webhook_and_prometheus_sinks_get_the_live_events(sqlite_store: Store) -> None:
    metrics = build_metrics()
    with scripted_server(lambda body, i: (200, {})) as (url, seen):
        webhook = WebhookSink(url, timeout_s=2.0)
        _run_live(sqlite_store, "sinks", _collapse_history(14), sinks=[LogSink(), PrometheusSink(metrics), webhook])
        deadline = time.monotonic() + 10
        while len(seen) < 2 * 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        webhook.close()
    statuses = {(b["rule"], b["status"]) for b in seen}
    assert ("topic_collapse", "firing") in statuses and ("topic_collapse", "resolved") in statuses
    assert 'propel_alerts_fired_total{rule="topic_collapse",severity="critical"} 1.0' in render(metrics)[0].decode()


def test_a_hanging_webhook_does_not_stall_the_daemon(sqlite_store: Store, hanging_url: str) -> None:
    webhook = WebhookSink(hanging_url, timeout_s=5.0, max_retries=3, backoff_s=1.0, max_queue=2)
    start = time.monotonic()
    _run_live(sqlite_store, "hang", _collapse_history(), sinks=[LogSink(), webhook])
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, f"24 cycles took {elapsed:.1f} s with a hanging webhook"
    assert webhook.dropped > 0 and webhook.delivered == 0
    webhook.close(timeout_s=1.0)


def _cli(url: str, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    res = runner.invoke(alerts, list(args), env={"PROPEL_DATABASE_URL": url}, catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def test_replay_cli_table_png_json_and_errors(sqlite_store: Store, tmp_path: Path) -> None:
    _run_live(sqlite_store, "cli", _collapse_history())
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\nname = "topic_collapse"\nmetric = "top_topic_share"\ncomparator = ">"\n'
                     'threshold = 0.5\nfor_cycles = 3\nseverity = "critical"\nmitigation = "retrain_aux_topic"\n'
                     '[[rules]]\nname = "tighter"\nmetric = "top_topic_share"\ncomparator = ">"\nthreshold = 0.6\n')
    png = tmp_path / "out" / "timeline.png"
    code, out, _ = _cli(sqlite_store.url, "replay", "--rules", str(rules), "--run", "cli", "--png", str(png))
    assert code == 0
    assert "topic_collapse" in out and "tighter" in out and "6→13" in out and "8→13" in out
    assert "(not in rules file)" in out  # stored alerts of rules outside the file are still listed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    code, out, _ = _cli(sqlite_store.url, "replay", "--rules", str(rules), "--run", "cli", "--json")
    data = json.loads(out)
    assert code == 0 and data["matches_stored"]["topic_collapse"] is True
    assert {"rule": "tighter", "cycle_fired": 6, "cycle_resolved": 13}.items() <= data["replayed"][0].items()

    code, _, err = _cli(sqlite_store.url, "replay", "--rules", str(rules), "--run", "nope")
    assert code == 2 and "no run named 'nope'" in err and "cli" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    metric: validity\n    comparator: '<'\n    threshold: low\n")
    code, _, err = _cli(sqlite_store.url, "replay", "--rules", str(bad), "--run", "cli")
    assert code == 2 and "rules[0].threshold" in err
