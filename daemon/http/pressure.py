"""How busy the API's queue is, for training work that yields to it (``api.yield_to_api``).

:class:`ApiPressure` counts the queue requests (``/v1/tasks/...``: lease, ack, nack, renew, export)
in flight and remembers when the last one ended; :class:`MarkPressure`, a plain ASGI middleware,
updates it around every such request. Status, health, metrics and dashboard requests are not
counted: a dashboard polling every few seconds should not hold the training. The training side
(:mod:`daemon.service.yielding`) reads :meth:`ApiPressure.idle_for` at its checkpoints.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

QUEUE_PREFIX = "/v1/tasks"


class ApiPressure:
    """Queue requests in flight and the end of the last one; thread-safe, a lock and a clock read per call."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._active = 0
        self._last_end = -math.inf
        self.requests = 0  # queue requests seen (started)

    def started(self) -> None:
        with self._lock:
            self._active += 1
            self.requests += 1

    def finished(self) -> None:
        now = self.clock()
        with self._lock:
            self._active -= 1
            self._last_end = now

    def idle_for(self, now: float | None = None) -> float:
        """Seconds since the last queue request ended (0 while one is in flight; inf before the first)."""
        at = self.clock() if now is None else now
        with self._lock:
            return 0.0 if self._active > 0 else max(0.0, at - self._last_end)


class MarkPressure:
    """ASGI middleware: every queue request is marked on ``pressure`` from its start to its answer."""

    def __init__(self, app: ASGIApp, pressure: ApiPressure) -> None:
        self.app, self.pressure = app, pressure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(QUEUE_PREFIX):
            await self.app(scope, receive, send)
            return
        self.pressure.started()
        try:
            await self.app(scope, receive, send)
        finally:
            self.pressure.finished()
