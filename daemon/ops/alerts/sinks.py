"""Alert sinks (log, Prometheus, webhook): every event after the store transaction committed."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from daemon.ops.alerts.evaluation import AlertEvent
from daemon.ops.metrics import PropelMetrics

log = logging.getLogger("propel.alerts")

# --------------------------------------------------------------------------------------------- sinks
class AlertSink(Protocol):
    def emit(self, event: AlertEvent, run: str) -> None: ...

    def close(self) -> None: ...


class LogSink:
    """Logs fires (warning, with the mitigation) and resolves (info) on ``propel.alerts``."""

    def emit(self, event: AlertEvent, run: str) -> None:
        spec = event.spec
        if event.kind == "fire" and spec is not None:
            log.warning("alert %s FIRING [%s] run=%s cycle=%d: %s = %.4g (%s)%s%s", event.rule, spec.severity.value,
                        run, event.cycle, spec.metric, event.value or 0.0, spec.expression,
                        f": {event.detail}" if event.detail else "",
                        f"; mitigation: {event.mitigation.describe()}" if event.mitigation else "")
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



def build_sinks(metrics: PropelMetrics | None = None, webhook_url: str | None = None) -> list[AlertSink]:
    """The standard sinks: log, Prometheus (with ``metrics``) and webhook (with ``webhook_url``)."""
    sinks: list[AlertSink] = [LogSink()]
    if metrics is not None:
        sinks.append(PrometheusSink(metrics))
    if webhook_url:
        sinks.append(WebhookSink(webhook_url))
    return sinks
