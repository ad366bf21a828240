"""Collapse alerts: rule models, rule files, a pure evaluator, and the per-cycle manager with sinks.

A rule fires when its metric met the condition (``metric comparator threshold``) in the last
``for_cycles`` *observations* of that metric, the current cycle included; it resolves at the first
later observation where the condition no longer holds. A cycle in which the metric was not recorded
neither breaks nor extends a streak (the daemon leaves a metric out when it is undefined, e.g. text
metrics of a too-small sample), and a cycle without the metric never fires or resolves the rule.
An open alert whose rule is no longer configured resolves at the next evaluation.

:func:`evaluate` is pure (history in, events out) and is what both the live daemon
(:class:`AlertManager`) and ``propel alerts replay`` run, so a replay of a stored history fires
exactly what the daemon fired with the same rules. Mitigations are returned as data with the alert
that caused them; the daemon applies them. Sinks (log, Prometheus, webhook) get every event after
the store transaction committed; a failing sink is logged and never stops the daemon.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import operator
import queue
import threading
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy.orm import Session

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.metrics import METRIC_TABLE_NAMES, PropelMetrics

log = logging.getLogger("propel.alerts")

History = Mapping[int, Mapping[str, float]]
"""cycle → {metric-table name: value}."""


class Comparator(StrEnum):
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="


_OPS: dict[Comparator, Callable[[float, float], bool]] = {
    Comparator.GT: operator.gt, Comparator.GE: operator.ge, Comparator.LT: operator.lt, Comparator.LE: operator.le,
}


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class MitigationKind(StrEnum):
    RETRAIN_AUX_TOPIC = "retrain_aux_topic"  # aux-probe retrain, dominant topic family as negatives
    RAISE_KL = "raise_kl"  # multiply the KL coefficient of the next RL chunk by ``factor``
    PAUSE_TOPIC = "pause_topic"  # stop emitting the dominant topic until the alert resolves


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MitigationSpec(_Frozen):
    """What the daemon should do when the rule fires; TOML: ``mitigation = "pause_topic"`` or a table."""

    kind: MitigationKind
    factor: float | None = Field(default=None, gt=1, le=100, description="raise_kl only: KL multiplier")

    @model_validator(mode="before")
    @classmethod
    def _default_factor(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("kind") == MitigationKind.RAISE_KL and data.get("factor") is None:
            return {**data, "factor": 2.0}
        return data

    @model_validator(mode="after")
    def _factor_only_for_kl(self) -> MitigationSpec:
        if self.kind is not MitigationKind.RAISE_KL and self.factor is not None:
            raise ValueError(f"factor only applies to raise_kl, not {self.kind.value}; remove it")
        return self


class AlertRule(_Frozen):
    """``metric comparator threshold`` held for ``for_cycles`` consecutive observations → alert."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    metric: str
    comparator: Comparator
    threshold: float
    for_cycles: int = Field(default=1, ge=1, le=10_000)
    severity: Severity = Severity.WARNING
    mitigation: MitigationSpec | None = None
    description: str = ""

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in METRIC_TABLE_NAMES:
            raise ValueError(f"unknown metric {value!r}; use one of: {', '.join(METRIC_TABLE_NAMES)}")
        return value

    @field_validator("mitigation", mode="before")
    @classmethod
    def _short_mitigation(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    def holds(self, value: float) -> bool:
        return _OPS[self.comparator](value, self.threshold)

    @property
    def expression(self) -> str:
        return f"{self.metric} {self.comparator.value} {self.threshold:g} for {self.for_cycles} cycle(s)"


class AlertRules(_Frozen):
    """A rule set (what a rules file holds; embed ``rules`` in ``AlertsConfig``)."""

    rules: tuple[AlertRule, ...] = Field(default_factory=lambda: DEFAULT_RULES)

    @field_validator("rules")
    @classmethod
    def _unique(cls, rules: tuple[AlertRule, ...]) -> tuple[AlertRule, ...]:
        names = [r.name for r in rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(dupes)}")
        return rules


DEFAULT_RULES: tuple[AlertRule, ...] = (
    AlertRule(name="topic_collapse", metric="top_topic_share", comparator=Comparator.GT, threshold=0.5,
              for_cycles=3, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RETRAIN_AUX_TOPIC),
              description="one topic dominates the valid tasks (PROPEL §6: 73% on one topic)"),
    AlertRule(name="topic_flooding", metric="top_topic_share", comparator=Comparator.GT, threshold=0.35,
              for_cycles=2, severity=Severity.WARNING,
              mitigation=MitigationSpec(kind=MitigationKind.PAUSE_TOPIC),
              description="the top topic's share is rising; pause emitting it"),
    AlertRule(name="distinct3_low", metric="distinct3", comparator=Comparator.LT, threshold=0.4,
              for_cycles=3, severity=Severity.WARNING,
              mitigation=MitigationSpec(kind=MitigationKind.RAISE_KL, factor=2.0),
              description="Distinct-3 of the fixed sample is falling (template collapse)"),
    AlertRule(name="self_bleu3_high", metric="self_bleu3", comparator=Comparator.GT, threshold=0.8,
              for_cycles=3, severity=Severity.WARNING,
              description="Self-BLEU-3 of the fixed sample is high (near-duplicate tasks)"),
    AlertRule(name="validity_low", metric="validity", comparator=Comparator.LT, threshold=0.5,
              for_cycles=2, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RAISE_KL, factor=4.0),
              description="most generator outputs are invalid (check the invalid floor lies below probe logits)"),
    AlertRule(name="probe_precision_low", metric="probe_precision", comparator=Comparator.LT, threshold=0.3,
              for_cycles=2, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RETRAIN_AUX_TOPIC),
              description="probe-high tasks are mostly out of band: the probe is being reward-hacked"),
)


# ----------------------------------------------------------------------------------------- rule files
class RuleFileError(Exception):
    """A rules file that cannot be used; ``problems`` holds ``(key, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source, self.problems = source, problems
        super().__init__("\n".join([f"{source}: {len(problems)} alert-rule error(s)",
                                    *(f"  {k}: {m}" for k, m in problems)]))


def rules_from_mapping(data: Any, source: str = "<rules>") -> tuple[AlertRule, ...]:
    """Validate ``{"rules": [...]}`` (or a propel config with ``[[alerts.rules]]``)."""
    if isinstance(data, Mapping) and "rules" not in data and isinstance(data.get("alerts"), Mapping):
        data, prefix = data["alerts"], "alerts."
    else:
        prefix = ""
    if not isinstance(data, Mapping) or "rules" not in data:
        raise RuleFileError(source, [("rules", "missing: write the rules as [[rules]] tables (TOML) "
                                               "or a `rules:` list (YAML)")])
    try:
        return AlertRules.model_validate({"rules": data["rules"]}).rules
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = [str(p) for p in e["loc"]]
            key = loc[0] + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:]) if loc else "rules"
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = "unknown key: remove it or check its spelling"
            elif e["type"] == "missing":
                msg = "required value is missing"
            problems.append((prefix + key, msg))
        raise RuleFileError(source, problems) from None


def load_rules(path: Path) -> tuple[AlertRule, ...]:
    """Rules from a ``.toml``, ``.yaml`` or ``.yml`` file; raises :class:`RuleFileError`."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RuleFileError(source, [("(file)", f"cannot read: {err}")]) from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise RuleFileError(source, [("(file)", "use a .toml, .yaml or .yml file")])
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
        raise RuleFileError(source, [("(syntax)", f"invalid {suffix[1:].upper()}: {err}")]) from None
    return rules_from_mapping(data, source)


# ------------------------------------------------------------------------------------ pure evaluation
@dataclass(frozen=True)
class OpenAlert:
    """An alert that fired and has not resolved (``alert_id`` is its row in the store, if stored)."""

    rule: str
    cycle_fired: int
    alert_id: int | None = None


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

    def as_dict(self, run: str) -> dict[str, Any]:
        spec = self.spec
        return {"schema_version": 1, "status": "firing" if self.kind == "fire" else "resolved",
                "run": run, "rule": self.rule, "alert_id": self.alert_id, "cycle": self.cycle, "value": self.value,
                "metric": spec.metric if spec else None, "comparator": spec.comparator.value if spec else None,
                "threshold": spec.threshold if spec else None, "for_cycles": spec.for_cycles if spec else None,
                "severity": spec.severity.value if spec else None, "description": spec.description if spec else "",
                "mitigation": self.mitigation.as_dict() if self.mitigation else None,
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


# --------------------------------------------------------------------------------------------- sinks
class AlertSink(Protocol):
    def emit(self, event: AlertEvent, run: str) -> None: ...

    def close(self) -> None: ...


class LogSink:
    """Logs fires (warning, with the mitigation) and resolves (info) on ``propel.alerts``."""

    def emit(self, event: AlertEvent, run: str) -> None:
        spec = event.spec
        if event.kind == "fire" and spec is not None:
            log.warning("alert %s FIRING [%s] run=%s cycle=%d: %s = %.4g (%s)%s", event.rule, spec.severity.value,
                        run, event.cycle, spec.metric, event.value or 0.0, spec.expression,
                        f"; mitigation: {event.mitigation.as_dict()}" if event.mitigation else "")
        else:
            log.info("alert %s resolved run=%s cycle=%d value=%s", event.rule, run, event.cycle, event.value)

    def close(self) -> None:
        return None


class PrometheusSink:
    """``propel_alerts_fired_total{rule,severity}`` += 1 per fire; ``propel_alert_active`` 1 while open."""

    def __init__(self, metrics: PropelMetrics) -> None:
        self.metrics = metrics

    def emit(self, event: AlertEvent, run: str) -> None:
        severity = event.spec.severity.value if event.spec else "unknown"
        if event.kind == "fire":
            self.metrics.alerts_fired.labels(rule=event.rule, severity=severity).inc()
        self.metrics.alert_active.labels(rule=event.rule, severity=severity).set(1 if event.kind == "fire" else 0)

    def close(self) -> None:
        return None


@dataclass
class WebhookSink:
    """POSTs each event as JSON from a background thread; never blocks the caller.

    The queue is bounded (``max_queue``); when it is full the event is dropped with a logged warning.
    A failed POST (connection error, timeout, 429 or 5xx) is retried ``max_retries`` times with
    exponential backoff (``backoff_s`` · 2^attempt); 4xx answers are not retried.
    """

    url: str
    timeout_s: float = 5.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_queue: int = 256
    headers: Mapping[str, str] = field(default_factory=dict)
    delivered: int = 0
    dropped: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=self.max_queue)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="propel-alert-webhook", daemon=True)
        self._thread.start()

    def emit(self, event: AlertEvent, run: str) -> None:
        try:
            self._queue.put_nowait(event.as_dict(run))
        except queue.Full:
            self.dropped += 1
            log.warning("alert webhook queue full (%d): dropped %s event of %s at cycle %d",
                        self.max_queue, event.kind, event.rule, event.cycle)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker: pending events are abandoned after ``timeout_s``."""
        self._stop.set()
        with contextlib.suppress(queue.Full):  # a full queue already wakes the worker
            self._queue.put_nowait(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s, headers=dict(self.headers)) as client:
            while not self._stop.is_set():
                payload = self._queue.get()
                if payload is None:
                    return
                self._deliver(client, payload)

    def _deliver(self, client: httpx.Client, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        for attempt in range(self.max_retries + 1):
            try:
                resp = client.post(self.url, content=body, headers={"content-type": "application/json"})
                if resp.status_code < 400:
                    self.delivered += 1
                    return
                if resp.status_code != 429 and resp.status_code < 500:
                    log.warning("alert webhook answered %d for %s; not retrying", resp.status_code, payload["rule"])
                    self.failed += 1
                    return
                reason = f"HTTP {resp.status_code}"
            except httpx.HTTPError as err:
                reason = f"{type(err).__name__}: {err}"
            if attempt < self.max_retries and self._stop.wait(self.backoff_s * 2 ** attempt):
                break  # closing: give up on this event
        self.failed += 1
        log.warning("alert webhook gave up on %s (%s) after %d attempt(s): %s", payload["rule"], payload["status"],
                    attempt + 1, reason)


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

    def on_cycle(self, cycle: int, metrics: Mapping[str, float], dominant_topic: str | None = None) -> CycleAlerts:
        """Evaluate ``cycle`` with its metric values (already written to the metrics table)."""
        self.history.setdefault(cycle, {}).update({k: float(v) for k, v in metrics.items()})
        if dominant_topic is not None:
            self.topics[cycle] = dominant_topic
        with self.store.session() as sess:
            rows = repo.open_alerts(sess, self.run_id)
            state = {r.rule: OpenAlert(r.rule, r.cycle_fired, r.id) for r in rows}
            events = evaluate(self.rules, self.history, state, [cycle], self.topics)
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
        return AlertEvent(event.kind, event.rule, event.cycle, event.value, spec, alert_id, event.mitigation)

    def _dispatch(self, event: AlertEvent) -> None:
        for sink in self.sinks:
            try:
                sink.emit(event, self.run_name)
            except Exception:  # a broken sink must not stop the daemon; it is logged with its traceback
                log.exception("alert sink %s failed on %s of %s", type(sink).__name__, event.kind, event.rule)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def build_sinks(metrics: PropelMetrics | None = None, webhook_url: str | None = None) -> list[AlertSink]:
    """The standard sinks: log, Prometheus (with ``metrics``) and webhook (with ``webhook_url``)."""
    sinks: list[AlertSink] = [LogSink()]
    if metrics is not None:
        sinks.append(PrometheusSink(metrics))
    if webhook_url:
        sinks.append(WebhookSink(webhook_url))
    return sinks
