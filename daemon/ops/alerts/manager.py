"""The daemon's per-cycle alert step: evaluate, persist fire/resolve, dispatch to sinks.

A failing sink is logged and never stops the daemon. Mitigations are returned as data with the alert
that caused them; the daemon applies them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.ops.alerts.evaluation import AlertEvent, Mitigation, OpenAlert, evaluate
from daemon.ops.alerts.rules import AlertRule, AlertRules
from daemon.ops.alerts.sinks import AlertSink, LogSink

log = logging.getLogger("propel.alerts")

# ------------------------------------------------------------------------------------- live manager
@dataclass(frozen=True)
class CycleAlerts:
    """What one cycle's evaluation did: the events and the mitigations the daemon should apply."""

    cycle: int
    fired: list[AlertEvent]
    resolved: list[AlertEvent]

    @property
    def mitigations(self) -> list[Mitigation]:
        return [e.mitigation for e in self.fired if e.mitigation is not None]

    def as_dict(self, run: str) -> dict[str, Any]:
        """JSON-ready summary (events as the webhook sends them, mitigations to apply)."""
        return {"cycle": self.cycle, "fired": [e.as_dict(run) for e in self.fired],
                "resolved": [e.as_dict(run) for e in self.resolved],
                "mitigations": [m.as_dict() for m in self.mitigations]}


class AlertManager:
    """The daemon's per-cycle alert step: evaluate, persist fire/resolve (store sink), dispatch sinks.

    The metric history is loaded from the store once and then extended with each cycle's values;
    the open alerts are re-read from the store every cycle, so a re-run cycle is idempotent.
    """

    def __init__(self, store: Store, run_id: int, run_name: str, rules: Sequence[AlertRule],
                 sinks: Sequence[AlertSink] = (), load_history: bool = True) -> None:
        self.store, self.run_id, self.run_name = store, run_id, run_name
        self.rules = tuple(AlertRules(rules=tuple(rules)).rules)
        self.sinks = list(sinks) if sinks else [LogSink()]
        self.history: dict[int, dict[str, float]] = {}
        self.topics: dict[int, str] = {}
        if load_history:
            with store.session() as sess:
                points = repo.metric_history(sess, run_id, sorted({r.metric for r in self.rules}))
            for p in points:
                self.history.setdefault(p.cycle, {})[p.name] = p.value

    def on_cycle(self, cycle: int, metrics: Mapping[str, float], dominant_topic: str | None = None,
                 details: Mapping[str, str] | None = None) -> CycleAlerts:
        """Evaluate ``cycle`` with its metric values (already written to the metrics table); ``details``
        (metric → why, in words) is carried by a firing alert on that metric."""
        self.history.setdefault(cycle, {}).update({k: float(v) for k, v in metrics.items()})
        if dominant_topic is not None:
            self.topics[cycle] = dominant_topic
        with self.store.session() as sess:
            rows = repo.open_alerts(sess, self.run_id)
            state = {r.rule: OpenAlert(r.rule, r.cycle_fired, r.id) for r in rows}
            events = evaluate(self.rules, self.history, state, [cycle], self.topics)
            events = [_with_detail(e, details or {}) for e in events]
            events = [self._persist(sess, e) for e in events]
        for event in events:
            self._dispatch(event)
        return CycleAlerts(cycle, [e for e in events if e.kind == "fire"], [e for e in events if e.kind == "resolve"])

    def _persist(self, sess: Session, event: AlertEvent) -> AlertEvent:
        if event.kind == "resolve":
            if event.alert_id is not None:
                repo.resolve_alert(sess, event.alert_id, event.cycle)
            return event
        spec = event.spec
        assert spec is not None and event.value is not None
        kind = event.mitigation.kind.value if event.mitigation else None
        alert_id = repo.fire_alert(sess, self.run_id, rule=event.rule, severity=spec.severity.value,
                                   metric=spec.metric, value=event.value, threshold=spec.threshold,
                                   cycle=event.cycle, mitigation=kind)
        return AlertEvent(event.kind, event.rule, event.cycle, event.value, spec, alert_id, event.mitigation,
                          event.detail)

    def _dispatch(self, event: AlertEvent) -> None:
        for sink in self.sinks:
            try:
                sink.emit(event, self.run_name)
            except Exception:  # a broken sink must not stop the daemon; it is logged with its traceback
                log.exception("alert sink %s failed on %s of %s", type(sink).__name__, event.kind, event.rule)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _with_detail(event: AlertEvent, details: Mapping[str, str]) -> AlertEvent:
    detail = details.get(event.spec.metric, "") if event.kind == "fire" and event.spec is not None else ""
    return replace(event, detail=detail) if detail else event
