"""The SDK's sans-I/O core: the wire format, the retry policy and each operation, written once as a
*flow* (a generator that yields the HTTP calls it needs and returns the result).

:func:`steps` wraps a flow with the retry rules: it yields a :class:`Call` to send or a
:class:`Sleep` to wait, and takes back the decoded answer or the exception the call raised.
``PropelClient`` (``propel_sdk.client``) and ``AsyncPropelClient`` (``propel_sdk.aio``) are thin
transports that only perform those two steps (``httpx.Client`` + ``time.sleep``, or
``httpx.AsyncClient`` + ``asyncio.sleep``), so request building, response parsing, the retry and
refusal rules, the schema check and the lease bookkeeping have one definition. The trainer-side
rules (report, ack batching, renewal of reported tasks, refusals, close) are
:class:`propel_sdk.ledger.Ledger`, driven the same way.
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
#: the most outcomes one ``POST /v1/tasks/ack`` takes (``curriculum.store.queue.MAX_BATCH``)
MAX_ACK_BATCH = 1000
#: a renew, ack or nack answer that says the lease is gone (409 lease_lost / not_leased, 404 not_found)
LOST_STATUSES = frozenset({404, 409})
#: a 500 may be a passing database failure or a request the server can never store: retried this often only
SERVER_ERROR_RETRIES = 2


class PropelClientError(Exception):
    """The API refused a request; ``status`` is the HTTP status code."""

    def __init__(self, status: int, detail: str, raw: Any = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.raw = raw  # the answer's ``detail`` as sent (a 422 lists each invalid field with its location)


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
    ride out a daemon restart of about a minute and a half. A 500 is retried at most
    :data:`SERVER_ERROR_RETRIES` times (it may never succeed: a request the store cannot take);
    any other 4xx is a refusal, raised at once."""

    max_retries: int = 8
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0

    def wait_s(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * random.uniform(0.9, 1.1)

    def should_retry(self, attempt: int, err: BaseException, call: Call | None = None) -> bool:
        if attempt >= self.max_retries:
            return False
        if isinstance(err, PropelClientError) and err.status == 500:
            return attempt < SERVER_ERROR_RETRIES and (call is None or call.retry_server_errors)
        return transient(err)

    def log(self, call: Call, url: str, attempt: int, err: BaseException, wait: float) -> None:
        log.warning("propel API %s %s failed (%s); retry %d/%d in %.1f s", call.method, url,
                    describe(err), attempt + 1, self.max_retries, wait)


def transient(err: BaseException) -> bool:
    """A failure that is worth retrying as is: the API is unreachable, restarting or behind a proxy that lost it."""
    return isinstance(err, httpx.TransportError) or (
        isinstance(err, PropelClientError) and err.status in RETRY_STATUSES)


def describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


@dataclass(frozen=True)
class Call:
    """One HTTP request of a flow."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, Any] | None = field(default=None)
    retry_server_errors: bool = True  # False: a 500 is answered at once (the caller isolates the cause)

    def content(self) -> bytes | None:
        return None if self.body is None else dumps(self.body)


@dataclass(frozen=True)
class Sleep:
    """Wait this long before the next step (a retry's backoff)."""

    seconds: float


JSON_HEADERS = {"content-type": "application/json"}
Flow = Generator[Call | Sleep, dict[str, Any], T]
#: what a client feeds back into a flow instead of an answer (the flow may handle it)
FLOW_ERRORS = (PropelClientError, httpx.TransportError)


Step = Call | Sleep
#: what a transport feeds back for a :class:`Call`: the decoded answer or the error it raised
Outcome = dict[str, Any] | PropelClientError | httpx.TransportError
Steps = Generator[Step, Outcome | None, T]


def steps(flow: Flow[T], retry: Retry, base_url: str = "") -> Steps[T]:
    """``flow`` with the retry rules applied: yields each call (again after a :class:`Sleep` while
    :meth:`Retry.should_retry` says so) and feeds the final answer, or error, back into the flow.
    The one loop both transports run."""
    try:
        call = next(flow)
        while True:
            if isinstance(call, Sleep):  # a flow's own wait (between flush attempts)
                yield call
                call = flow.send({})
                continue
            attempt = 0
            while True:
                outcome = yield call
                if isinstance(outcome, FLOW_ERRORS) and retry.should_retry(attempt, outcome, call):
                    wait = retry.wait_s(attempt)
                    retry.log(call, f"{base_url}{call.path}", attempt, outcome, wait)
                    yield Sleep(wait)
                    attempt += 1
                    continue
                break
            call = flow.throw(outcome) if isinstance(outcome, FLOW_ERRORS) else flow.send(outcome or {})
    except StopIteration as stop:
        result: T = stop.value
        return result


def drive(flow: Flow[T], send: Callable[[Call], dict[str, Any]], retry: Retry | None = None,
          sleep: Callable[[float], None] | None = None, base_url: str = "") -> T:
    """Run ``flow`` to its result with a blocking ``send`` (the sync transport). Without ``retry`` a
    failed call is fed back at once."""
    machine = steps(flow, retry or Retry(max_retries=0), base_url)
    try:
        step = next(machine)
        while True:
            if isinstance(step, Sleep):
                if sleep is not None:
                    sleep(step.seconds)
                step = machine.send(None)
                continue
            try:
                outcome: Outcome = send(step)
            except FLOW_ERRORS as err:
                outcome = err
            step = machine.send(outcome)
    except StopIteration as stop:
        result: T = stop.value
        return result


def decode(resp: httpx.Response) -> dict[str, Any]:
    """The JSON answer, or :class:`PropelClientError` with the API's ``detail``."""
    if resp.status_code >= 400:
        try:
            raw = loads(resp.content).get("detail")
        except (ValueError, AttributeError):
            raise PropelClientError(resp.status_code, resp.text[:300]) from None
        raise PropelClientError(resp.status_code, str(raw), raw)
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
        self.server_takes_tried = True  # False once the server refused nack's ``tried`` field

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
                    yield from self.nack(t, tried=False)
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

    def ack_many(self, outcomes: Sequence[Ack], *, retry_server_errors: bool = True) -> Flow[dict[int, str]]:
        """A status per task id; more than :data:`MAX_ACK_BATCH` outcomes go in several requests."""
        answers = yield from self.ack_many_detailed(outcomes, retry_server_errors=retry_server_errors)
        return {tid: status for tid, (status, _) in answers.items()}

    def ack_many_detailed(self, outcomes: Sequence[Ack], *,
                          retry_server_errors: bool = True) -> Flow[dict[int, tuple[str, str]]]:
        """:meth:`ack_many` with each item's ``detail`` (why an ``invalid`` item was refused; else "")."""
        body = []
        for o in outcomes:
            task_id, token = self.id_token(o.task, o.lease_token)
            body.append({"id": task_id, **ack_body(solved=o.solved, n=o.n, solver=o.solver, lease_token=token,
                                                   errors=o.errors, version=o.version,
                                                   version_order=o.version_order, sampling=o.sampling)})
        statuses: dict[int, tuple[str, str]] = {}
        for i in range(0, len(body), MAX_ACK_BATCH):  # the API's limit per request
            data = yield Call("POST", "/v1/tasks/ack", {"outcomes": body[i:i + MAX_ACK_BATCH]},
                              retry_server_errors=retry_server_errors)
            statuses.update((int(r["id"]), (str(r["status"]), str(r.get("detail") or ""))) for r in data["results"])
        for task_id in statuses:
            self.forget(task_id)
        return statuses

    def nack(self, task: LeasedTask | int, lease_token: str | None = None, *, tried: bool = True) -> Flow[str]:
        """Give the task back. ``tried=False`` (a task never handed to the trainer: read ahead, or a batch
        the schema check refused) asks the server to give the delivery attempt back too. A server that
        does not know the field yet (422 naming ``tried``) gets the plain nack, and this client stops
        sending the field."""
        task_id, token = self.id_token(task, lease_token)
        body: dict[str, Any] = {"lease_token": token}
        if not tried and self.server_takes_tried:
            body["tried"] = False
        try:
            data = yield Call("POST", f"/v1/tasks/{task_id}/nack", body)
        except PropelClientError as err:
            if "tried" not in body or err.status != 422 or "tried" not in err.detail:
                raise
            self.server_takes_tried = False
            log.info("propel API does not take nack's 'tried' field yet: an untried nack costs a delivery attempt")
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
                if err.status not in LOST_STATUSES:
                    raise  # the API is down or refuses us (401 after a token rotation): keep the leases
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


class ClientBase:
    """What both clients hold besides their transport: the retry policy, the operations (with the
    client's outstanding leases) and the bearer token."""

    _http: httpx.Client | httpx.AsyncClient

    def __init__(self, http: httpx.Client | httpx.AsyncClient, token: str | None, retry: Retry) -> None:
        self._http, self.retry, self._ops = http, retry, Operations()
        self.set_token(token)

    @property
    def operations(self) -> Operations:
        """The sans-I/O operations this client sends (a :class:`~propel_sdk.ledger.Ledger` runs on them)."""
        return self._ops

    def set_token(self, token: str | None) -> None:
        """Use another bearer token from the next request on (a rotated ``PROPEL_API_TOKEN``)."""
        if token:
            self._http.headers["Authorization"] = f"Bearer {token}"
        else:
            self._http.headers.pop("Authorization", None)
