"""The asyncio twin of :class:`propel_sdk.client.PropelClient` (``httpx.AsyncClient``).

    async with AsyncPropelClient("http://propel:8787", token=token) as client:
        async for task in client.iterate(batch=32, lease_s=600, consumer="trainer-0"):
            await client.ack(task, solved=await solve(task), n=8, solver="my-policy", version=1200)

Same methods, same semantics (schema check, retries, at-least-once delivery; see
:mod:`propel_sdk.client`): every operation is the shared flow of :mod:`propel_sdk.protocol`, only
sent with ``await``. ``iterate`` renews outstanding leases in a background asyncio task.

:class:`AsyncTaskStream` is the asyncio twin of :class:`propel_sdk.torch_data.TaskStream` (without
torch): the same :class:`~propel_sdk.ledger.Ledger` rules for reports, batched acks, renewal of
reported tasks, refusals and close.

    async with AsyncTaskStream(client, solver="my-policy", version="step-0") as stream:
        async for task in stream:
            await stream.report(task.id, solved=await solve(task), n=8)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx

from propel_sdk.ledger import CloseSummary, Ledger, Refusal
from propel_sdk.protocol import (
    FLOW_ERRORS,
    JSON_HEADERS,
    Ack,
    ClientBase,
    Flow,
    LeasedTask,
    Operations,
    Outcome,
    PropelClientError,
    Retry,
    Sleep,
    T,
    decode,
    describe,
    loads,
    log,
    steps,
    transient,
)

__all__ = ["AsyncPropelClient", "AsyncTaskStream", "CloseSummary", "Refusal"]


class AsyncPropelClient(ClientBase):
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0, *,
                 max_retries: int = Retry.max_retries, backoff_s: float = Retry.backoff_s,
                 max_backoff_s: float = Retry.max_backoff_s) -> None:
        self._http: httpx.AsyncClient = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s)
        super().__init__(self._http, token, Retry(max_retries, backoff_s, max_backoff_s))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPropelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def run(self, flow: Flow[T]) -> T:
        """:func:`propel_sdk.protocol.drive` with ``await``: the same steps (calls, retry waits) of the same core."""
        machine = steps(flow, self.retry, str(self._http.base_url))
        try:
            step = next(machine)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = machine.send(None)
                    continue
                try:
                    outcome: Outcome = decode(await self._http.request(
                        step.method, step.path, content=step.content(), params=step.params,
                        headers=JSON_HEADERS if step.body is not None else None))
                except FLOW_ERRORS as err:
                    outcome = err
                step = machine.send(outcome)
        except StopIteration as stop:
            result: T = stop.value
            return result

    _run = run

    async def lease(self, n: int = 1, lease_s: float = 600, consumer: str = "python-client", *,
                    domains: Mapping[str, float] | None = None, topics: Mapping[str, float] | None = None,
                    predicted_in_band: tuple[float, float] | None = None,
                    solver: str | None = None) -> list[LeasedTask]:
        """See :meth:`propel_sdk.client.PropelClient.lease`."""
        return await self._run(self._ops.lease(n, lease_s, consumer, domains=domains, topics=topics,
                                               predicted_in_band=predicted_in_band, solver=solver))

    async def ack(self, task: LeasedTask | int, *, solved: int, n: int, solver: str, lease_token: str | None = None,
                  errors: int = 0, version: str | int | None = None, version_order: int | None = None,
                  sampling: dict[str, Any] | None = None) -> str:
        """See :meth:`propel_sdk.client.PropelClient.ack`."""
        return await self._run(self._ops.ack(task, solved=solved, n=n, solver=solver, lease_token=lease_token,
                                             errors=errors, version=version, version_order=version_order,
                                             sampling=sampling))

    async def ack_many(self, outcomes: Sequence[Ack]) -> dict[int, str]:
        """See :meth:`propel_sdk.client.PropelClient.ack_many`."""
        return await self._run(self._ops.ack_many(outcomes))

    async def nack(self, task: LeasedTask | int, lease_token: str | None = None, *, tried: bool = True) -> str:
        """See :meth:`propel_sdk.client.PropelClient.nack`."""
        return await self._run(self._ops.nack(task, lease_token, tried=tried))

    async def renew(self, task: LeasedTask | int, lease_s: float = 600, lease_token: str | None = None) -> None:
        await self._run(self._ops.renew(task, lease_s, lease_token))

    async def announce(self, solver: str, version: str | int, order: int | None = None) -> dict[str, Any]:
        return await self._run(self._ops.announce(solver, version, order))

    async def solver_versions(self, solver: str) -> dict[str, Any]:
        return await self._run(self._ops.solver_versions(solver))

    async def status(self) -> dict[str, Any]:
        return await self._run(self._ops.status())

    async def export(self, **query: Any) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`propel_sdk.client.PropelClient.export`. Not retried."""
        call = Operations.export_call(query)
        async with self._http.stream(call.method, call.path, params=call.params, timeout=None) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise PropelClientError(resp.status_code, resp.text[:300])
            async for line in resp.aiter_lines():
                if line:
                    yield loads(line)

    async def iterate(self, batch: int = 16, lease_s: float = 600, consumer: str = "python-client",
                      stop_when_empty: bool = True, **selection: Any) -> AsyncIterator[LeasedTask]:
        """Yield leased tasks batch by batch, renewing outstanding leases every ``lease_s / 3`` in a
        background asyncio task (cancelled when the iteration ends)."""
        renewer = asyncio.create_task(self._renew_loop(lease_s))
        try:
            while True:
                tasks = await self.lease(batch, lease_s, consumer, **selection)
                if not tasks and stop_when_empty:
                    return
                for task in tasks:
                    yield task
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew_loop(self, lease_s: float) -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            try:
                await self._run(self._ops.renew_outstanding())
            except FLOW_ERRORS as err:
                log.warning("propel API: renewing leases failed (%s); next try in %.0f s", describe(err), lease_s / 3)


class AsyncTaskStream:
    """Leased tasks one by one (``async for``); :meth:`report` queues an outcome, acked ``ack_every`` at a
    time; :meth:`close` flushes and nacks the rest (read-ahead with ``tried=False``). The iteration
    ends when a lease finds the queue empty (or after ``max_tasks``)."""

    def __init__(self, client: AsyncPropelClient, *, solver: str, version: str | int | None = None, batch: int = 16,
                 lease_s: float = 600.0, consumer: str = "async-trainer", ack_every: int = 16,
                 max_tasks: int | None = None, selection: Mapping[str, Any] | None = None,
                 poll_s: float = 1.0, idle_timeout_s: float = 0.0,
                 on_refused: Callable[[Refusal], None] | None = None) -> None:
        if batch < 1 or ack_every < 1:
            raise ValueError("batch and ack_every must be ≥ 1")
        self.client, self.batch, self.consumer, self.max_tasks = client, batch, consumer, max_tasks
        self.selection, self.poll_s, self.idle_timeout_s = dict(selection or {}), poll_s, idle_timeout_s
        self.ledger = Ledger(client.operations, solver, version, lease_s=lease_s, ack_every=ack_every,
                             on_refused=on_refused)
        self._renewer: asyncio.Task[None] | None = None

    async def __aiter__(self) -> AsyncIterator[LeasedTask]:
        """Tasks in lease order; an empty queue (or an unreachable API) is polled every ``poll_s`` until
        ``idle_timeout_s`` passed without a task (0: the first empty lease ends the iteration)."""
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_loop())
        idle_since = time.monotonic()
        while True:
            task = self.ledger.next_task()
            if task is not None:
                idle_since = time.monotonic()
                yield task
                continue
            room = self.batch if self.max_tasks is None else min(self.batch, self.max_tasks - self.ledger.leased)
            if room <= 0:
                return
            try:
                if await self.client.run(self.ledger.lease(room, self.consumer, self.selection)):
                    continue
            except FLOW_ERRORS as err:
                if not transient(err):
                    raise
                log.warning("lease failed (%s): retrying in %.1f s", describe(err), self.poll_s)
            if time.monotonic() - idle_since >= self.idle_timeout_s:
                return
            await asyncio.sleep(self.poll_s)

    def message(self, task_id: int) -> dict[str, Any]:
        """See :meth:`propel_sdk.torch_data.TaskStream.message`."""
        return self.ledger.message(task_id)

    def set_version(self, version: str | int | None) -> None:
        self.ledger.version = version

    async def report(self, task_id: int, solved: int, n: int, errors: int = 0) -> bool:
        """See :meth:`propel_sdk.torch_data.TaskStream.report` (flushes when ``ack_every`` are pending;
        the outcome is recorded before that flush, so a 401 it raises loses nothing)."""
        if not self.ledger.report(task_id, solved, n, errors):
            return False
        if self.ledger.due:
            await self.flush()
        return True

    async def flush(self) -> bool:
        return await self.client.run(self.ledger.flush())

    async def close(self, flush_attempts: int = 3) -> CloseSummary:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        return await self.client.run(self.ledger.close(flush_attempts))

    async def __aenter__(self) -> AsyncTaskStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ledger.lease_s / 3)
            try:
                await self.client.run(self.ledger.renew())
            except FLOW_ERRORS as err:
                level = logging.WARNING if transient(err) else logging.ERROR
                log.log(level, "renewing leases failed (%s): every task and report is kept", describe(err))
