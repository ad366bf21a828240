"""How busy the API's queue is, for training work that yields to it (``api.yield_to_api``).

:class:`ApiPressure` remembers when the last queue request that did work was answered;
:class:`MarkPressure`, a plain ASGI middleware, marks it at the end of every request under
``/v1/tasks`` (lease, ack, nack, renew, export) answered with success, except a lease that found
nothing (refused requests — no token, bad input — never mark: whoever may not use the queue cannot hold
the training by hammering it); a trainer polling
an empty queue waits for tasks the training makes, so its polls must not hold the training (the
lease route says so through the request's state, :data:`NOTHING_LEASED`). Status, health, metrics
and dashboard requests are not marked: a dashboard polling every few seconds should not hold the
training. The training side (:mod:`daemon.service.yielding`) reads :meth:`ApiPressure.idle_for` at
its checkpoints.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

QUEUE_PREFIX = "/v1/tasks"
#: Set to True in a request's state (``request.state``) by a lease that leased nothing.
NOTHING_LEASED = "propel_nothing_leased"


class ApiPressure:
    """When the last queue request with work was answered; thread-safe, a lock and a clock read per call."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._last = -math.inf
        self.requests = 0  # queue requests marked

    def mark(self) -> None:
        now = self.clock()
        with self._lock:
            self._last = now
            self.requests += 1

    def idle_for(self, now: float | None = None) -> float:
        """Seconds since the last marked request was answered (inf before the first)."""
        at = self.clock() if now is None else now
        with self._lock:
            return max(0.0, at - self._last)


class MarkPressure:
    """ASGI middleware: every queue request answered with success marks ``pressure`` (unless it leased
    nothing). Refused requests (401 without the token, 422, 404, 429, ...) do not: a client that may not
    use the queue cannot hold the training by hammering it."""

    def __init__(self, app: ASGIApp, pressure: ApiPressure) -> None:
        self.app, self.pressure = app, pressure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(QUEUE_PREFIX):
            await self.app(scope, receive, send)
            return
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if 200 <= status < 400 and not scope.get("state", {}).get(NOTHING_LEASED):
                self.pressure.mark()
