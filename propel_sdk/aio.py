"""The asyncio twin of :class:`propel_sdk.client.PropelClient` (``httpx.AsyncClient``).

    async with AsyncPropelClient("http://propel:8787", token=token) as client:
        async for task in client.iterate(batch=32, lease_s=600, consumer="trainer-0"):
            await client.ack(task, solved=await solve(task), n=8, solver="my-policy", version=1200)

Same methods, same semantics (schema check, retries, at-least-once delivery; see
:mod:`propel_sdk.client`): every operation is the shared flow of :mod:`propel_sdk.protocol`, only
sent with ``await``. ``iterate`` renews outstanding leases in a background asyncio task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from propel_sdk.protocol import (
    FLOW_ERRORS,
    JSON_HEADERS,
    Ack,
    Call,
    Flow,
    LeasedTask,
    Operations,
    PropelClientError,
    Retry,
    T,
    decode,
    describe,
    loads,
    log,
)

__all__ = ["AsyncPropelClient"]


class AsyncPropelClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0, *,
                 max_retries: int = Retry.max_retries, backoff_s: float = Retry.backoff_s,
                 max_backoff_s: float = Retry.max_backoff_s) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.retry = Retry(max_retries, backoff_s, max_backoff_s)
        self._ops = Operations()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPropelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return decode(await self._http.request(
                    call.method, call.path, content=call.content(), params=call.params,
                    headers=JSON_HEADERS if call.body is not None else None))
            except (httpx.TransportError, PropelClientError) as err:
                if not self.retry.should_retry(attempt, err):
                    raise
                wait = self.retry.wait_s(attempt)
                self.retry.log(call, f"{self._http.base_url}{call.path}", attempt, err, wait)
                await asyncio.sleep(wait)
                attempt += 1

    async def _run(self, flow: Flow[T]) -> T:
        """:func:`propel_sdk.protocol.drive`, awaiting each call."""
        try:
            call = next(flow)
            while True:
                try:
                    answer = await self._send(call)
                except FLOW_ERRORS as err:
                    call = flow.throw(err)
                else:
                    call = flow.send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result

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

    async def nack(self, task: LeasedTask | int, lease_token: str | None = None) -> str:
        return await self._run(self._ops.nack(task, lease_token))

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
            except (PropelClientError, httpx.TransportError) as err:
                log.warning("propel API: renewing leases failed (%s); next try in %.0f s", describe(err), lease_s / 3)
