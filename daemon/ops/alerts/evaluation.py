"""Pure alert evaluation: history in, fire/resolve events (with mitigations) out.

A rule fires when its metric met the condition (``metric comparator threshold``) in the last
``for_cycles`` *observations* of that metric, the current cycle included; it resolves at the first
later observation where the condition no longer holds. A cycle in which the metric was not recorded
neither breaks nor extends a streak (the daemon leaves a metric out when it is undefined, e.g. text
metrics of a too-small sample), and a cycle without the metric never fires or resolves the rule.
An open alert whose rule is no longer configured resolves at the next evaluation.

:func:`evaluate` is what both the live daemon (:class:`~daemon.ops.alerts.manager.AlertManager`) and
``propel alerts replay`` run, so a replay of a stored history fires exactly what the daemon fired.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from daemon.ops.alerts.rules import AlertRule, History, MitigationKind

log = logging.getLogger("propel.alerts")

# ------------------------------------------------------------------------------------ pure evaluation
@dataclass(frozen=True)
class OpenAlert:
    """An alert that fired and has not resolved (``alert_id`` is its row in the store, if stored)."""

    rule: str
    cycle_fired: int
    alert_id: int | None = None


def mitigation_words(kind: str, topic: str | None, factor: float | None) -> str:
    """A mitigation as a readable phrase (log lines, the alert's message)."""
    if kind == "pause_topic":
        return f"pause emitting topic {topic}" if topic else "pause emitting the dominant topic"
    if kind == "retrain_aux_topic":
        return (f"retrain an aux probe with topic {topic}'s tasks as negatives" if topic
                else "retrain an aux probe on the mined false positives")
    if kind == "raise_kl":
        return f"raise the KL coefficient ×{factor:g} for the next RL chunk" if factor else "raise the KL coefficient"
    return kind.replace("_", " ")


@dataclass(frozen=True)
class Mitigation:
    """An action the daemon should take because ``rule`` fired at ``cycle``."""

    kind: MitigationKind
    rule: str
    cycle: int
    factor: float | None = None
    topic: str | None = None  # dominant topic at firing time (retrain_aux_topic, pause_topic)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "rule": self.rule, "cycle": self.cycle, "factor": self.factor,
                "topic": self.topic}

    def describe(self) -> str:
        """The mitigation as a readable phrase (the log line; #38: not a dict)."""
        return mitigation_words(self.kind.value, self.topic, self.factor)


@dataclass(frozen=True)
class AlertEvent:
    """A rule firing or resolving at ``cycle``; ``value`` is the metric then (``None``: rule removed)."""

    kind: Literal["fire", "resolve"]
    rule: str
    cycle: int
    value: float | None
    spec: AlertRule | None
    alert_id: int | None = None
    mitigation: Mitigation | None = None
    detail: str = ""  # why, in words, when the daemon knows more than the metric (e.g. emission_stalled)

    def as_dict(self, run: str) -> dict[str, Any]:
        spec = self.spec
        return {"schema_version": 1, "status": "firing" if self.kind == "fire" else "resolved",
                "run": run, "rule": self.rule, "alert_id": self.alert_id, "cycle": self.cycle, "value": self.value,
                "metric": spec.metric if spec else None, "comparator": spec.comparator.value if spec else None,
                "threshold": spec.threshold if spec else None, "for_cycles": spec.for_cycles if spec else None,
                "severity": spec.severity.value if spec else None, "description": spec.description if spec else "",
                "mitigation": self.mitigation.as_dict() if self.mitigation else None, "detail": self.detail,
                "at": datetime.now(UTC).isoformat(timespec="seconds")}


def _series(history: History, metrics: Iterable[str]) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = {m: ([], []) for m in metrics}
    for cycle in sorted(history):
        for name, (cycles, values) in out.items():
            if name in history[cycle]:
                cycles.append(cycle)
                values.append(float(history[cycle][name]))
    return out


def evaluate(rules: Sequence[AlertRule], history: History, open_alerts: Mapping[str, OpenAlert],
             cycles: Iterable[int] | None = None, topics: Mapping[int, str] | None = None) -> list[AlertEvent]:
    """Fire/resolve events of ``rules`` at each of ``cycles`` (default: every cycle in ``history``), in order.

    ``open_alerts`` (rule name → open alert) is the state before the first evaluated cycle; it is not
    modified. ``topics`` (cycle → dominant topic) fills the topic of topic mitigations.
    """
    series = _series(history, {r.metric for r in rules})
    state = dict(open_alerts)
    known = {r.name for r in rules}
    events: list[AlertEvent] = []
    for cycle in sorted(history) if cycles is None else sorted(set(cycles)):
        for name in [n for n in state if n not in known]:
            events.append(AlertEvent("resolve", name, cycle, None, None, state.pop(name).alert_id))
        for rule in rules:
            cycles_seen, values = series[rule.metric]
            pos = bisect.bisect_right(cycles_seen, cycle)
            if pos == 0 or cycles_seen[pos - 1] != cycle:
                continue  # metric not observed this cycle
            value = values[pos - 1]
            if rule.name in state:
                if not rule.holds(value):
                    events.append(AlertEvent("resolve", rule.name, cycle, value, rule, state.pop(rule.name).alert_id))
                continue
            window = values[max(0, pos - rule.for_cycles):pos]
            if len(window) == rule.for_cycles and all(rule.holds(v) for v in window):
                mit = None
                if rule.mitigation is not None:
                    kind = rule.mitigation.kind
                    topic = None if kind is MitigationKind.RAISE_KL else (topics or {}).get(cycle)
                    mit = Mitigation(kind, rule.name, cycle, rule.mitigation.factor, topic)
                events.append(AlertEvent("fire", rule.name, cycle, value, rule, None, mit))
                state[rule.name] = OpenAlert(rule.name, cycle)
    return events
