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
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson

# A batch of leased tasks is tens of kB of JSON: orjson reads and writes it several times faster.
_dumps, _loads = orjson.dumps, orjson.loads


class PropelClientError(Exception):
    """The API refused a request; ``status`` is the HTTP status code."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Ack:
    """One outcome for :meth:`PropelClient.ack_many`."""

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
    id: int
    lease_token: str
    lease_until: str
    attempts: int
    message: dict[str, Any]


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


class PropelClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self._outstanding: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PropelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self._http.post(path, content=_dumps(body), headers={"content-type": "application/json"})
        if resp.status_code >= 400:
            try:
                detail = str(_loads(resp.content).get("detail"))
            except ValueError:
                detail = resp.text[:300]
            raise PropelClientError(resp.status_code, detail)
        data: dict[str, Any] = _loads(resp.content)
        return data

    def lease(self, n: int = 1, lease_s: float = 600, consumer: str = "python-client", *,
              domains: Mapping[str, float] | None = None, topics: Mapping[str, float] | None = None,
              predicted_in_band: tuple[float, float] | None = None, solver: str | None = None) -> list[LeasedTask]:
        """Lease up to ``n`` tasks; optionally a mixture (``domains={"arith": 0.7, "math": 0.3}`` or
        ``topics=…``), a ``predicted_in_band=(lo, hi)`` range and one ``solver``'s tasks."""
        body: dict[str, Any] = {"n": n, "lease_s": lease_s, "consumer": consumer}
        if domains is not None:
            body["domains"] = dict(domains)
        if topics is not None:
            body["topics"] = dict(topics)
        if predicted_in_band is not None:
            body["predicted_in_band"] = {"min": predicted_in_band[0], "max": predicted_in_band[1]}
        if solver is not None:
            body["solver"] = solver
        data = self._post("/v1/tasks/lease", body)
        tasks = [LeasedTask(int(t["task"]["id"]), t["lease_token"], t["lease_until"], int(t["attempts"]), t["task"])
                 for t in data["tasks"]]
        with self._lock:
            for t in tasks:
                self._outstanding[t.id] = (t.lease_token, lease_s)
        return tasks

    def ack(self, task: LeasedTask | int, *, solved: int, n: int, solver: str, lease_token: str | None = None,
            errors: int = 0, version: str | int | None = None, version_order: int | None = None,
            sampling: dict[str, Any] | None = None) -> str:
        """Report ``solved`` of ``n`` attempts by ``solver`` at ``version``; ``errors`` attempts that failed
        for infrastructure reasons are excluded from the count. Answers ``acked``, ``late`` (accepted
        after the lease expired) or ``already_acked``; raises :class:`PropelClientError` (409) when the
        lease was lost."""
        task_id, token = self._id_token(task, lease_token)
        status = str(self._post(f"/v1/tasks/{task_id}/ack", ack_body(
            solved=solved, n=n, solver=solver, lease_token=token, errors=errors, version=version,
            version_order=version_order, sampling=sampling))["status"])
        self._forget(task_id)
        return status

    def announce(self, solver: str, version: str | int, order: int | None = None) -> dict[str, Any]:
        """Announce ``version`` of ``solver`` (idempotent). The highest-ordered version is current:
        spot-checks are recorded against it and a sample of labelled tasks is re-measured on it."""
        body: dict[str, Any] = {"version": str(version)}
        if order is not None:
            body["order"] = order
        return self._post(f"/v1/solvers/{quote(solver, safe='/')}/versions", body)

    def solver_versions(self, solver: str) -> dict[str, Any]:
        """The known versions of ``solver`` with their order and age (0 = current)."""
        resp = self._http.get(f"/v1/solvers/{quote(solver, safe='/')}/versions")
        if resp.status_code >= 400:
            raise PropelClientError(resp.status_code, resp.text[:300])
        data: dict[str, Any] = resp.json()
        return data

    def ack_many(self, outcomes: Sequence[Ack]) -> dict[int, str]:
        """Ack many outcomes in one request (up to 1000); a status per task id, never an exception for
        a refused item (``lease_lost``, ``not_leased``, ``not_found`` are statuses here)."""
        body = []
        for o in outcomes:
            task_id, token = self._id_token(o.task, o.lease_token)
            body.append({"id": task_id, **ack_body(solved=o.solved, n=o.n, solver=o.solver, lease_token=token,
                                                   errors=o.errors, version=o.version,
                                                   version_order=o.version_order, sampling=o.sampling)})
        data = self._post("/v1/tasks/ack", {"outcomes": body})
        statuses = {int(r["id"]): str(r["status"]) for r in data["results"]}
        for task_id in statuses:
            self._forget(task_id)
        return statuses

    def nack(self, task: LeasedTask | int, lease_token: str | None = None) -> str:
        task_id, token = self._id_token(task, lease_token)
        status = str(self._post(f"/v1/tasks/{task_id}/nack", {"lease_token": token})["status"])
        self._forget(task_id)
        return status

    def renew(self, task: LeasedTask | int, lease_s: float = 600, lease_token: str | None = None) -> None:
        task_id, token = self._id_token(task, lease_token)
        self._post(f"/v1/tasks/{task_id}/renew", {"lease_token": token, "lease_s": lease_s})

    def export(self, **query: Any) -> Iterator[dict[str, Any]]:
        """Stream the API run's queued tasks as records (``GET /v1/tasks/export``; filters: ``state``,
        ``topic``, ``domain`` (lists), ``since``, ``until`` (ISO times), ``limit``)."""
        params = {k: v for k, v in query.items() if v not in (None, [], ())}
        with self._http.stream("GET", "/v1/tasks/export", params=params, timeout=None) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise PropelClientError(resp.status_code, resp.text[:300])
            for line in resp.iter_lines():
                if line:
                    yield _loads(line)

    def status(self) -> dict[str, Any]:
        resp = self._http.get("/v1/status")
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def iterate(self, batch: int = 16, lease_s: float = 600, consumer: str = "python-client",
                stop_when_empty: bool = True, **selection: Any) -> Iterator[LeasedTask]:
        """Yield leased tasks batch by batch (``selection``: the keyword filters of :meth:`lease`),
        renewing outstanding leases every ``lease_s / 3``."""
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
            with self._lock:
                held = list(self._outstanding.items())
            for task_id, (token, held_s) in held:
                try:
                    self.renew(task_id, held_s, token)
                except PropelClientError:
                    self._forget(task_id)  # lease lost or task gone: nothing left to keep alive

    def _id_token(self, task: LeasedTask | int, lease_token: str | None) -> tuple[int, str]:
        """The task id and the lease token to send: given, from the task, or from this client's leases."""
        if isinstance(task, LeasedTask):
            return task.id, lease_token or task.lease_token
        with self._lock:
            held = self._outstanding.get(task)
        token = lease_token or (held[0] if held else None)
        if token is None:
            raise ValueError(f"task {task}: no lease token (pass lease_token=, or the LeasedTask this client leased)")
        return task, token

    def _forget(self, task_id: int) -> None:
        with self._lock:
            self._outstanding.pop(task_id, None)
