"""What the sync and the async client share: the wire format, the retry policy and each operation,
written once as a *flow* (a generator that yields the HTTP calls it needs and returns the result).

``PropelClient`` (``propel_sdk.client``) and ``AsyncPropelClient`` (``propel_sdk.aio``) only send
the calls a flow yields (with retries) and feed the decoded answers back, so request building,
response parsing, the schema check and the lease bookkeeping have one definition.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson

from propel_sdk.schema import FrontierTask, SchemaVersionError, check_schema_version, parse_message

log = logging.getLogger("propel_sdk")
# A batch of leased tasks is tens of kB of JSON: orjson reads and writes it several times faster.
dumps, loads = orjson.dumps, orjson.loads
T = TypeVar("T")
#: HTTP statuses that mean "the API is restarting or behind a proxy that lost it": retried
RETRY_STATUSES = frozenset({502, 503, 504})


class PropelClientError(Exception):
    """The API refused a request; ``status`` is the HTTP status code."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Ack:
    """One outcome for ``ack_many``."""

    task: LeasedTask | int
    solved: int
    n: int
    solver: str
    lease_token: str | None = None
    errors: int = 0  # attempts lost to infrastructure failures (excluded from the count)
    version: str | int | None = None  # the solver version that made the attempts
    version_order: int | None = None
    sampling: dict[str, Any] | None = None


@dataclass(frozen=True)
class LeasedTask:
    """A leased task: its id, the lease, and the message (a dict; :attr:`frontier_task` is the typed view)."""

    id: int
    lease_token: str
    lease_until: str
    attempts: int
    message: dict[str, Any]

    @cached_property
    def frontier_task(self) -> FrontierTask:
        """The message as a typed :class:`~propel_sdk.schema.FrontierTask` (validated on first access)."""
        return parse_message(self.message)


@dataclass(frozen=True)
class Retry:
    """Retry policy for connection errors and 502/503/504: up to ``max_retries`` retries, waiting
    ``backoff_s * 2**i`` (capped at ``max_backoff_s``, ±10 % jitter) before retry ``i``. The defaults
    ride out a daemon restart of about a minute and a half."""

    max_retries: int = 8
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def wait_s(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * random.uniform(0.9, 1.1)

    def should_retry(self, attempt: int, err: Exception) -> bool:
        if attempt >= self.max_retries:
            return False
        return isinstance(err, httpx.TransportError) or (
            isinstance(err, PropelClientError) and err.status in RETRY_STATUSES)

    def log(self, call: Call, url: str, attempt: int, err: Exception, wait: float) -> None:
        log.warning("propel API %s %s failed (%s); retry %d/%d in %.1f s", call.method, url,
                    describe(err), attempt + 1, self.max_retries, wait)


def describe(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


@dataclass(frozen=True)
class Call:
    """One HTTP request of a flow."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, Any] | None = field(default=None)

    def content(self) -> bytes | None:
        return None if self.body is None else dumps(self.body)


JSON_HEADERS = {"content-type": "application/json"}
Flow = Generator[Call, dict[str, Any], T]
#: what a client feeds back into a flow instead of an answer (the flow may handle it)
FLOW_ERRORS = (PropelClientError, httpx.TransportError)


def drive(flow: Flow[T], send: Callable[[Call], dict[str, Any]]) -> T:
    """Run ``flow`` to its result with ``send`` (the sync client's request function)."""
    try:
        call = next(flow)
        while True:
            try:
                answer = send(call)
            except FLOW_ERRORS as err:
                call = flow.throw(err)
            else:
                call = flow.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


def decode(resp: httpx.Response) -> dict[str, Any]:
    """The JSON answer, or :class:`PropelClientError` with the API's ``detail``."""
    if resp.status_code >= 400:
        try:
            detail = str(loads(resp.content).get("detail"))
        except (ValueError, AttributeError):
            detail = resp.text[:300]
        raise PropelClientError(resp.status_code, detail)
    data: dict[str, Any] = loads(resp.content)
    return data


def ack_body(*, solved: int, n: int, solver: str, lease_token: str | None = None, errors: int = 0,
             version: str | int | None = None, version_order: int | None = None,
             sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of one outcome (the single-task ack and a batched ack send the same fields)."""
    body: dict[str, Any] = {"solved": solved, "n": n, "solver": solver, "lease_token": lease_token}
    if errors:
        body["errors"] = errors
    if version is not None:
        body["version"] = str(version)
    if version_order is not None:
        body["version_order"] = version_order
    if sampling is not None:
        body["sampling"] = sampling
    return body


def lease_body(n: int, lease_s: float, consumer: str, domains: Mapping[str, float] | None,
               topics: Mapping[str, float] | None, predicted_in_band: tuple[float, float] | None,
               solver: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"n": n, "lease_s": lease_s, "consumer": consumer}
    if domains is not None:
        body["domains"] = dict(domains)
    if topics is not None:
        body["topics"] = dict(topics)
    if predicted_in_band is not None:
        body["predicted_in_band"] = {"min": predicted_in_band[0], "max": predicted_in_band[1]}
    if solver is not None:
        body["solver"] = solver
    return body


class Operations:
    """Every API operation as a flow, plus the client's outstanding leases (what ``iterate`` renews)."""

    def __init__(self) -> None:
        self._outstanding: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def lease(self, n: int, lease_s: float, consumer: str, *, domains: Mapping[str, float] | None = None,
              topics: Mapping[str, float] | None = None, predicted_in_band: tuple[float, float] | None = None,
              solver: str | None = None) -> Flow[list[LeasedTask]]:
        data = yield Call("POST", "/v1/tasks/lease",
                          lease_body(n, lease_s, consumer, domains, topics, predicted_in_band, solver))
        tasks = [LeasedTask(int(t["task"]["id"]), t["lease_token"], t["lease_until"], int(t["attempts"]), t["task"])
                 for t in data["tasks"]]
        with self._lock:
            for t in tasks:
                self._outstanding[t.id] = (t.lease_token, lease_s)
        try:
            for t in tasks:
                check_schema_version(t.message)
        except SchemaVersionError:
            # The caller never sees this batch: give every task back now, so none stays leased (and
            # unrenewed) until its lease expires, and an up-to-date trainer can take it at once.
            for t in tasks:
                try:
                    yield from self.nack(t)
                except (PropelClientError, httpx.HTTPError):
                    self.forget(t.id)  # lost or unreachable: its lease expires and it is delivered again
            raise
        return tasks

    def ack(self, task: LeasedTask | int, *, solved: int, n: int, solver: str, lease_token: str | None = None,
            errors: int = 0, version: str | int | None = None, version_order: int | None = None,
            sampling: dict[str, Any] | None = None) -> Flow[str]:
        task_id, token = self.id_token(task, lease_token)
        data = yield Call("POST", f"/v1/tasks/{task_id}/ack", ack_body(
            solved=solved, n=n, solver=solver, lease_token=token, errors=errors, version=version,
            version_order=version_order, sampling=sampling))
        self.forget(task_id)
        return str(data["status"])

    def ack_many(self, outcomes: Sequence[Ack]) -> Flow[dict[int, str]]:
        body = []
        for o in outcomes:
            task_id, token = self.id_token(o.task, o.lease_token)
            body.append({"id": task_id, **ack_body(solved=o.solved, n=o.n, solver=o.solver, lease_token=token,
                                                   errors=o.errors, version=o.version,
                                                   version_order=o.version_order, sampling=o.sampling)})
        data = yield Call("POST", "/v1/tasks/ack", {"outcomes": body})
        statuses = {int(r["id"]): str(r["status"]) for r in data["results"]}
        for task_id in statuses:
            self.forget(task_id)
        return statuses

    def nack(self, task: LeasedTask | int, lease_token: str | None = None) -> Flow[str]:
        task_id, token = self.id_token(task, lease_token)
        data = yield Call("POST", f"/v1/tasks/{task_id}/nack", {"lease_token": token})
        self.forget(task_id)
        return str(data["status"])

    def renew(self, task: LeasedTask | int, lease_s: float, lease_token: str | None = None) -> Flow[None]:
        task_id, token = self.id_token(task, lease_token)
        yield Call("POST", f"/v1/tasks/{task_id}/renew", {"lease_token": token, "lease_s": lease_s})

    def renew_outstanding(self) -> Flow[int]:
        """Renew every outstanding lease; a lease the API refuses is forgotten. Returns how many were renewed."""
        with self._lock:
            held = list(self._outstanding.items())
        renewed = 0
        for task_id, (token, held_s) in held:
            try:
                yield from self.renew(task_id, held_s, token)
                renewed += 1
            except PropelClientError as err:
                if err.status in RETRY_STATUSES:
                    raise  # the API is down (retries spent): keep the leases, try again next round
                self.forget(task_id)  # lease lost or task gone: nothing left to keep alive
        return renewed

    def announce(self, solver: str, version: str | int, order: int | None = None) -> Flow[dict[str, Any]]:
        body: dict[str, Any] = {"version": str(version)}
        if order is not None:
            body["order"] = order
        return (yield Call("POST", f"/v1/solvers/{quote(solver, safe='/')}/versions", body))

    def solver_versions(self, solver: str) -> Flow[dict[str, Any]]:
        return (yield Call("GET", f"/v1/solvers/{quote(solver, safe='/')}/versions"))

    def status(self) -> Flow[dict[str, Any]]:
        return (yield Call("GET", "/v1/status"))

    @staticmethod
    def export_call(query: Mapping[str, Any]) -> Call:
        return Call("GET", "/v1/tasks/export", params={k: v for k, v in query.items() if v not in (None, [], ())})

    def id_token(self, task: LeasedTask | int, lease_token: str | None) -> tuple[int, str]:
        """The task id and the lease token to send: given, from the task, or from this client's leases."""
        if isinstance(task, LeasedTask):
            return task.id, lease_token or task.lease_token
        with self._lock:
            held = self._outstanding.get(task)
        token = lease_token or (held[0] if held else None)
        if token is None:
            raise ValueError(f"task {task}: no lease token (pass lease_token=, or the LeasedTask this client leased)")
        return task, token

    def forget(self, task_id: int) -> None:
        with self._lock:
            self._outstanding.pop(task_id, None)
