"""Python client for solver trainers: lease frontier tasks, ack outcomes, nack, renew.

    client = PropelClient("http://propel:8787", token=os.environ["PROPEL_API_TOKEN"])
    for task in client.iterate(batch=32, lease_s=600, consumer="trainer-0"):
        solved = train_on(task.message)          # your code
        client.ack(task, solved=solved, n=8, errors=0, solver="my-policy", version=1200)
    client.announce("my-policy", 1300)          # a new checkpoint: spot-checks and drift follow it

Acks need the lease token (a ``LeasedTask`` carries it); many at once with
``client.ack_many([Ack(task, solved=3, n=8, solver="pol@1200"), ...])``. Delivery is at-least-once:
a task whose lease expires (trainer crashed) is delivered again, so make training on a task
idempotent or tolerate repeats; ``ack`` is idempotent. ``iterate`` renews the
leases of tasks it handed out and that are not yet acked or nacked, in a background thread.

Schema check: every leased message's ``schema_version`` is checked; an unknown one raises
:class:`~propel_sdk.schema.SchemaVersionError` ("… newer than this SDK …: upgrade propel-curriculum")
after the whole batch was given back (nacked with ``tried=False``: never handed to the trainer, so the
server gives the delivery attempt back), so no task stays leased by a trainer that cannot read it.

Retries: a connection error, a timeout or a 502/503/504 (the daemon restarting) is retried with
exponential backoff (a 500 twice only: it may be a request the server can never store)
(:class:`~propel_sdk.protocol.Retry`: ``max_retries``, ``backoff_s``,
``max_backoff_s``), logging one WARNING per retry on the ``propel_sdk`` logger with the URL, the
error and the wait; other refusals raise :class:`PropelClientError` at once. Retrying is safe:
``ack``/``ack_many`` are idempotent on the server (a retried ack whose first try landed answers
``already_acked``, and the outcome is stored once); a retried ``lease`` whose first try was served
but whose answer was lost leaves those tasks leased to nobody until their lease expires, and then
they are delivered again (at-least-once: nothing is lost, a task may arrive late); ``renew`` only
extends a lease. A retried ``nack`` whose first try landed answers 409 (the lease is gone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from propel_sdk.protocol import (
    FLOW_ERRORS,
    JSON_HEADERS,
    Ack,
    Call,
    ClientBase,
    Flow,
    LeasedTask,
    Operations,
    PropelClientError,
    Retry,
    T,
    ack_body,
    decode,
    describe,
    drive,
    loads,
    log,
)

__all__ = ["Ack", "LeasedTask", "PropelClient", "PropelClientError", "Retry", "ack_body"]


class PropelClient(ClientBase):
    """Sync client (``httpx.Client``); :class:`propel_sdk.aio.AsyncPropelClient` is the asyncio twin."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0, *,
                 max_retries: int = Retry.max_retries, backoff_s: float = Retry.backoff_s,
                 max_backoff_s: float = Retry.max_backoff_s) -> None:
        self._http: httpx.Client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)
        super().__init__(self._http, token, Retry(max_retries, backoff_s, max_backoff_s))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PropelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> dict[str, Any]:
        return decode(self._http.request(call.method, call.path, content=call.content(), params=call.params,
                                         headers=JSON_HEADERS if call.body is not None else None))

    def run(self, flow: Flow[T]) -> T:
        """Run a flow of :mod:`propel_sdk.protocol` (or :mod:`propel_sdk.ledger`) with this client's retries."""
        return drive(flow, self._send, self.retry, time.sleep, str(self._http.base_url))

    _run = run

    def lease(self, n: int = 1, lease_s: float = 600, consumer: str = "python-client", *,
              domains: Mapping[str, float] | None = None, topics: Mapping[str, float] | None = None,
              predicted_in_band: tuple[float, float] | None = None, solver: str | None = None) -> list[LeasedTask]:
        """Lease up to ``n`` tasks; optionally a mixture (``domains={"arith": 0.7, "math": 0.3}`` or
        ``topics=…``), a ``predicted_in_band=(lo, hi)`` range and one ``solver``'s tasks. Raises
        :class:`~propel_sdk.schema.SchemaVersionError` (after nacking the batch) for a message this
        SDK cannot read."""
        return self._run(self._ops.lease(n, lease_s, consumer, domains=domains, topics=topics,
                                         predicted_in_band=predicted_in_band, solver=solver))

    def ack(self, task: LeasedTask | int, *, solved: int, n: int, solver: str, lease_token: str | None = None,
            errors: int = 0, version: str | int | None = None, version_order: int | None = None,
            sampling: dict[str, Any] | None = None) -> str:
        """Report ``solved`` of ``n`` attempts by ``solver`` at ``version``; ``errors`` attempts that failed
        for infrastructure reasons are excluded from the count. Answers ``acked``, ``late`` (accepted
        after the lease expired) or ``already_acked``; raises :class:`PropelClientError` (409) when the
        lease was lost."""
        return self._run(self._ops.ack(task, solved=solved, n=n, solver=solver, lease_token=lease_token,
                                       errors=errors, version=version, version_order=version_order,
                                       sampling=sampling))

    def ack_many(self, outcomes: Sequence[Ack]) -> dict[int, str]:
        """Ack many outcomes (more than 1,000 go in several requests); a status per task id, never an exception for
        a refused item (``lease_lost``, ``not_leased``, ``not_found`` are statuses here)."""
        return self._run(self._ops.ack_many(outcomes))

    def nack(self, task: LeasedTask | int, lease_token: str | None = None, *, tried: bool = True) -> str:
        """Give a leased task back now (``returned``); it is dead-lettered once its attempts are spent.
        ``tried=False`` says the trainer never worked on it: the server gives the delivery attempt back
        (a server without that rule yet ignores it and the nack costs one attempt, as an expiry would)."""
        return self._run(self._ops.nack(task, lease_token, tried=tried))

    def renew(self, task: LeasedTask | int, lease_s: float = 600, lease_token: str | None = None) -> None:
        """Extend the lease to ``lease_s`` seconds from now; 409 when it was lost."""
        self._run(self._ops.renew(task, lease_s, lease_token))

    def announce(self, solver: str, version: str | int, order: int | None = None) -> dict[str, Any]:
        """Announce ``version`` of ``solver`` (idempotent). The highest-ordered version is current:
        spot-checks are recorded against it and a sample of labelled tasks is re-measured on it."""
        return self._run(self._ops.announce(solver, version, order))

    def solver_versions(self, solver: str) -> dict[str, Any]:
        """The known versions of ``solver`` with their order and age (0 = current)."""
        return self._run(self._ops.solver_versions(solver))

    def status(self) -> dict[str, Any]:
        return self._run(self._ops.status())

    def export(self, **query: Any) -> Iterator[dict[str, Any]]:
        """Stream the API run's queued tasks as records (``GET /v1/tasks/export``; filters: ``state``,
        ``topic``, ``domain`` (lists), ``since``, ``until`` (ISO times), ``limit``). Not retried."""
        call = Operations.export_call(query)
        with self._http.stream(call.method, call.path, params=call.params, timeout=None) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise PropelClientError(resp.status_code, resp.text[:300])
            for line in resp.iter_lines():
                if line:
                    yield loads(line)

    def iterate(self, batch: int = 16, lease_s: float = 600, consumer: str = "python-client",
                stop_when_empty: bool = True, **selection: Any) -> Iterator[LeasedTask]:
        """Yield leased tasks batch by batch (``selection``: the keyword filters of :meth:`lease`),
        renewing outstanding leases every ``lease_s / 3`` in a background thread."""
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew_loop, args=(stop, lease_s), daemon=True)
        renewer.start()
        try:
            while True:
                tasks = self.lease(batch, lease_s, consumer, **selection)
                if not tasks and stop_when_empty:
                    return
                yield from tasks
        finally:
            stop.set()
            renewer.join(timeout=5)

    def _renew_loop(self, stop: threading.Event, lease_s: float) -> None:
        while not stop.wait(lease_s / 3):
            try:
                self._run(self._ops.renew_outstanding())
            except FLOW_ERRORS as err:
                log.warning("propel API: renewing leases failed (%s); next try in %.0f s", describe(err), lease_s / 3)
