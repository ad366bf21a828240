"""The HTTP API: pull frontier tasks with leases, ack outcomes, status, health, Prometheus metrics.

Queue endpoints (``/v1/tasks/...``) require ``Authorization: Bearer $PROPEL_API_TOKEN`` when a token
is configured (compared in constant time). Bodies above ``api.max_body_bytes`` get 413; malformed
JSON or out-of-range fields get 422 (in a batched ack: an ``invalid`` result for that item alone).
Acked outcomes are stored as labels (source ``consumer``) of the solver version that made them;
they feed probe retraining, calibration and drift like spot-check labels
(:mod:`curriculum.frontier.frontier_labels`). ``/v1/solvers/...`` announces versions.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from curriculum.frontier import frontier_labels
from curriculum.frontier.followed import Followed, FollowMode
from curriculum.store import queue, solver_versions
from curriculum.store.db import Store, StoreError
from curriculum.store.models import Run
from curriculum.store.selection import MixtureKey, Selection, lease_selected, unknown_names
from curriculum.store.transfer import ExportFilter, export_rows
from daemon.config import mask_secrets
from daemon.http.fields import Text
from daemon.http.following import NoticeLog, following, resolve_followed
from daemon.http.outcomes import AckBatchRequest, AckRequest, ItemResult, LeaseTokenField, parse_items
from daemon.http.pressure import NOTHING_LEASED, ApiPressure, MarkPressure
from daemon.http.run_status import daemon_status, live_problems
from daemon.http.solvers import solver_routes
from daemon.http.task_stats import stats_route
from probes.band import Band

QueueState = Literal["ready", "leased", "acked", "dead", "stale"]
TaskId = Annotated[int, Path(ge=1, le=2**31 - 1, description="task id from the leased message")]

ACK_HTTP = {queue.AckStatus.NOT_FOUND: 404, queue.AckStatus.LEASE_LOST: 409, queue.AckStatus.NOT_LEASED: 409,
            queue.AckStatus.INVALID: 422}


@dataclass
class ApiContext:
    store: Store
    run_name: str
    token: str | None = None
    max_attempts: int = 5
    band: tuple[int, int] = (1, 3)
    k: int = 8
    heartbeat_stale_s: float = 300.0
    max_body_bytes: int = 1_048_576
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    min_valid_trials: int = 6

    def label_band(self) -> Band:
        """The run's band rule for trainer outcomes (``min_valid_trials`` capped at ``k``)."""
        return Band(self.k, self.band[0], self.band[1], min(self.min_valid_trials, self.k))
    refresh_metrics: Callable[[], None] | None = None  # called before each /metrics scrape
    run_id: int | None = None  # resolved from run_name on first use
    known_names: set[tuple[str, str]] = field(default_factory=set)  # (kind, name) seen in the run's queue
    pressure: ApiPressure | None = None  # marked by queue requests answered with work (``propel run`` yields to them)
    followed: tuple[str, ...] = ()  # the configured solver's name (empty: unknown, nothing is said)
    follow_mode: FollowMode = "config"  # solver.follow: the configured solver, or the first trainer's
    notices: NoticeLog = field(default_factory=NoticeLog)  # "not followed", logged once per name

    def follows(self, sess: Session) -> Followed | None:
        """The solver followed now (:mod:`curriculum.frontier.followed`; None: unknown, nothing is said)."""
        return resolve_followed(sess, self.followed, self.follow_mode)

    def resolve_run(self, sess: Session) -> int | None:
        """The id of this API's run (None until the run exists): every queue call is scoped to it."""
        if self.run_id is None:
            self.run_id = sess.scalars(select(Run.id).where(Run.name == self.run_name)).first()
        return self.run_id


Name = Annotated[Text, Field(min_length=1, max_length=128)]
Weight = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]


class PredictedRange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min: float = Field(default=0.0, ge=0, le=1)
    max: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> PredictedRange:
        if self.min > self.max:
            raise ValueError("min cannot exceed max")
        return self


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(default=1, ge=1, le=1000, description="how many tasks to lease")
    lease_s: float = Field(default=600, gt=0, le=86_400, description="lease duration in seconds")
    consumer: Text = Field(min_length=1, max_length=128, description="who is leasing (for logs and status)")
    domains: dict[Name, Weight] | None = Field(default=None, min_length=1, max_length=64,
                                               description="mixture over domains: name → weight")
    topics: dict[Name, Weight] | None = Field(default=None, min_length=1, max_length=64,
                                              description="mixture over topics: name → weight")
    predicted_in_band: PredictedRange | None = Field(default=None, description="range of the probes' predicted "
                                                     "in-band probability, e.g. {\"min\": 0.6, \"max\": 0.9}")
    solver: Text | None = Field(default=None, min_length=1, max_length=256,
                                description="only tasks selected for this solver's frontier")

    @model_validator(mode="after")
    def _one_mixture(self) -> LeaseRequest:
        if self.domains is not None and self.topics is not None:
            raise ValueError("give domains or topics, not both")
        return self

    def selection(self) -> Selection:
        by: MixtureKey | None = "domain" if self.domains else "topic" if self.topics else None
        rng = self.predicted_in_band
        return Selection(by=by, weights=dict(self.domains or self.topics or {}),
                         min_predicted=rng.min if rng else None, max_predicted=rng.max if rng else None,
                         solver=self.solver)


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease_token: Text = LeaseTokenField
    lease_s: float = Field(default=600, gt=0, le=86_400, description="renew: the new lease runs this long from now")


class NackRequest(TokenRequest):
    tried: bool = Field(default=True, description="false: the task was never tried (read ahead, never handed to "
                        "the trainer); the delivery attempt its lease counted is given back")


class FastJSON(Response):
    """JSON rendered by orjson straight from plain values (no ``jsonable_encoder`` pass)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class BodyLimit:
    """413 for bodies above the limit, by header or by streamed size (a plain ASGI middleware:
    ``BaseHTTPMiddleware`` re-wraps every request and response and cost a third of a lease call)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # read by a route: FastAPI turns it into the 413 answer
                raise HTTPException(413, f"request body above {self.limit} bytes")
            return message

        await self.app(scope, counted, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        resp = JSONResponse({"detail": f"request body above {self.limit} bytes"}, status_code=413)
        await resp(scope, receive, send)


def _ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


def require_token(request: Request, ctx: Annotated[ApiContext, Depends(_ctx)]) -> None:
    if ctx.token is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), ctx.token.encode()):
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


Ctx = Annotated[ApiContext, Depends(_ctx)]
Auth = Depends(require_token)


def create_app(ctx: ApiContext) -> FastAPI:
    """The ASGI app (OpenAPI at ``/docs`` and ``/openapi.json``)."""
    app = FastAPI(title="propel-curriculum", version="1", description=__doc__)
    app.state.ctx = ctx
    app.state.store = ctx.store  # the dashboard router reads these two
    app.state.run_name = ctx.run_name
    app.add_middleware(BodyLimit, limit=ctx.max_body_bytes)
    if ctx.pressure is not None:  # outermost: a request counts from its arrival to its answer
        app.add_middleware(MarkPressure, pressure=ctx.pressure)
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]
    _queue_routes(app)
    _export_route(app)
    stats_route(app, Auth)
    _status_routes(app)
    solver_routes(app, Auth)
    try:
        from daemon.http.dashboard import router as dashboard_router
    except ModuleNotFoundError as err:  # the dashboard is optional at import time only in partial checkouts
        if err.name != "daemon.http.dashboard":
            raise
    else:
        app.include_router(dashboard_router)
    return app


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with location, message and type only: echoing the input back could itself fail to encode
    (a lone surrogate) and turn a client error into a 500."""
    detail = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
              for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


def _queue_routes(app: FastAPI) -> None:
    @app.post("/v1/tasks/lease", dependencies=[Auth], tags=["queue"], response_class=FastJSON)
    def lease(body: LeaseRequest, ctx: Ctx, request: Request) -> Response:
        """Lease up to ``n`` frontier tasks for ``lease_s`` seconds (at-least-once delivery), optionally a
        mixture of ``domains`` or ``topics`` (name → weight), a ``predicted_in_band`` range and a ``solver``;
        an unknown name is a 422."""
        sel = body.selection()
        with ctx.store.autocommit() as s:  # each lease statement is atomic on its own
            run_id = ctx.resolve_run(s)
            missing = [] if run_id is None else unknown_names(s, run_id, sel, ctx.known_names)
            if missing:
                return _unknown(missing, ctx.run_name)
            got = [] if run_id is None else lease_selected(s, body.n, body.lease_s, body.consumer, ctx.max_attempts,
                                                           run_id=run_id, sel=sel)
        if not got:  # a poll of an empty queue: the training yields nothing to it (daemon/http/pressure.py)
            setattr(request.state, NOTHING_LEASED, True)
        return FastJSON({"tasks": [{"lease_token": x.lease_token, "lease_until": x.lease_until.isoformat(),
                                    "attempts": x.attempts, "task": orjson.Fragment(x.message_json)} for x in got]})

    @app.post("/v1/tasks/ack", dependencies=[Auth], tags=["queue"], response_class=FastJSON)
    def ack_many(body: AckBatchRequest, ctx: Ctx) -> FastJSON:
        """Ack many outcomes in one call: a result per item, in request order (``acked``, ``late``,
        ``already_acked``, ``lease_lost``, ``not_leased``, ``not_found``, or ``invalid`` with a
        ``detail``); one bad item is refused alone, never the batch. Idempotent, one outcome per task."""
        valid, refused = parse_items(body.outcomes)
        acked = _ack(ctx, [(o.id, o) for o in valid])
        it = iter(valid)
        results = [refused[i] if i in refused else acked[next(it).id] for i in range(len(body.outcomes))]
        counts: dict[str, int] = {}
        for r in results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        return FastJSON({"results": [r.json() for r in results], "counts": counts})

    @app.post("/v1/tasks/{task_id}/ack", dependencies=[Auth], tags=["queue"])
    def ack(task_id: TaskId, body: AckRequest, ctx: Ctx) -> dict[str, Any]:
        """Record the trainer's outcome: ``acked``, ``late`` (after ``lease_until``, nobody else had the
        task) or ``already_acked`` (the same token again: idempotent); 409 when the lease was lost
        (another consumer holds or acked the task), 404 for an unknown task, 422 for an outcome the
        store cannot take.

        The outcome becomes a ``consumer`` label of the solver version (registered on first sight).
        """
        result = _ack(ctx, [(task_id, body)])[task_id]
        if result.status in ACK_HTTP:
            raise HTTPException(ACK_HTTP[result.status], result.detail or result.status.value)
        return {"id": task_id, "status": result.status.value}

    @app.post("/v1/tasks/{task_id}/nack", dependencies=[Auth], tags=["queue"])
    def nack(task_id: TaskId, body: NackRequest, ctx: Ctx) -> dict[str, Any]:
        """Give a leased task back now (it is dead-lettered once its attempts are spent); with
        ``"tried": false`` (never tried) the delivery attempt is given back too."""
        with ctx.store.autocommit() as s:
            run_id = ctx.resolve_run(s)
            status = queue.AckStatus.NOT_FOUND if run_id is None else queue.nack(
                s, task_id, run_id=run_id, lease_token=body.lease_token, max_attempts=ctx.max_attempts,
                tried=body.tried)
        if status in ACK_HTTP:
            raise HTTPException(ACK_HTTP[status], status.value)
        return {"id": task_id, "status": "returned" if status.accepted else status.value,
                "late": status == queue.AckStatus.LATE}

    @app.post("/v1/tasks/{task_id}/renew", dependencies=[Auth], tags=["queue"])
    def renew(task_id: TaskId, body: TokenRequest, ctx: Ctx) -> dict[str, Any]:
        """Extend the lease to ``lease_s`` seconds from now (``late`` when it had expired but nobody
        else had taken the task)."""
        with ctx.store.autocommit() as s:
            run_id = ctx.resolve_run(s)
            status = queue.AckStatus.NOT_FOUND if run_id is None else queue.renew(
                s, task_id, run_id=run_id, lease_token=body.lease_token, lease_s=body.lease_s)
        if not status.accepted:
            raise HTTPException(ACK_HTTP.get(status, 409), status.value)
        return {"id": task_id, "status": "renewed", "late": status == queue.AckStatus.LATE}


def _export_route(app: FastAPI) -> None:
    @app.get("/v1/tasks/export", dependencies=[Auth], tags=["queue"], response_class=StreamingResponse)
    def export(ctx: Ctx, state: Annotated[list[QueueState] | None, Query()] = None,
               topic: Annotated[list[Name] | None, Query()] = None,
               domain: Annotated[list[Name] | None, Query()] = None,
               since: datetime | None = None, until: datetime | None = None,
               limit: Annotated[int | None, Query(ge=1, le=100_000_000)] = None) -> StreamingResponse:
        """The run's queued tasks as JSONL records (message, ``text``, ``queue``: state, attempts, times,
        the trainer's outcome) in enqueue order; what ``propel tasks import`` reads back."""
        flt = ExportFilter(states=tuple(state or ()), topics=tuple(topic or ()), domains=tuple(domain or ()),
                           since=_aware(since), until=_aware(until), limit=limit)

        def lines() -> Iterator[bytes]:
            with ctx.store.session() as s:
                run_id = ctx.resolve_run(s)
                if run_id is None:
                    return
                for row in export_rows(s, run_id, flt):
                    yield orjson.dumps(row) + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")


def _aware(t: datetime | None) -> datetime | None:
    return None if t is None or t.tzinfo is not None else t.replace(tzinfo=UTC)


def _unknown(missing: list[tuple[str, str]], run_name: str) -> JSONResponse:
    """422 naming each unknown domain, topic or solver (the shape of a validation error)."""
    field_of = {"domain": "domains", "topic": "topics", "solver": "solver"}
    detail = [{"loc": ["body", field_of[kind], *([name] if kind != "solver" else [])],
               "msg": f"unknown {kind} {name!r}: no task of run {run_name!r} has it", "type": "value_error"}
              for kind, name in missing]
    return JSONResponse({"detail": detail}, status_code=422)


def _ack(ctx: ApiContext, items: list[tuple[int, AckRequest]]) -> dict[int, ItemResult]:
    """Ack outcomes of this API's run, register the solver version of each accepted one and store it as
    a ``consumer`` label, in one transaction (an outcome, its version and its label are written together
    or not at all). An item whose version cannot be registered is ``invalid`` alone; a refused ack
    registers nothing."""
    try:
        return _ack_once(ctx, items)
    except solver_versions.VersionError:
        # a concurrent first registration gave a version another order after the check: nothing of this
        # batch was written; the check now sees that version and refuses its items alone
        return _ack_once(ctx, items)


def _ack_once(ctx: ApiContext, items: list[tuple[int, AckRequest]]) -> dict[int, ItemResult]:
    with ctx.store.session() as s:
        run_id = ctx.resolve_run(s)
        if run_id is None:
            return {tid: ItemResult(tid, queue.AckStatus.NOT_FOUND) for tid, _ in items}
        bad = solver_versions.check_registrations(s, [_version_key(b) for _, b in items])  # read-only
        # task order: two batches touching the same rows (two runs replaying one task) lock them alike
        ok = sorted(((tid, b) for tid, b in items if _version_key(b) not in bad), key=lambda it: it[0])
        statuses = queue.ack_many(s, [b.outcome(tid) for tid, b in ok], run_id=run_id)
        accepted = [(tid, b) for tid, b in ok if statuses[tid].accepted]
        _register_versions(s, [b for _, b in accepted])
        _store_outcomes(s, ctx, run_id, accepted)
    results = {tid: ItemResult(tid, st) for tid, st in statuses.items()}
    results.update({tid: ItemResult(tid, queue.AckStatus.INVALID, f"version: {bad[_version_key(b)]}")
                    for tid, b in items if _version_key(b) in bad})
    return results


def _store_outcomes(s: Session, ctx: ApiContext, run_id: int, items: list[tuple[int, AckRequest]]) -> None:
    """One ``consumer`` label of run ``run_id`` per accepted ack, of the solver version that made it (registered
    already), in one multi-row write. The queue accepts one outcome per task, so each label is
    written once. A solver name this daemon does not follow is logged once."""
    ctx.notices.once(sorted({body.solver_version()[0] for _, body in items}), ctx.follows(s))
    frontier_labels.record_trainer_outcomes(s, [_outcome(tid, body) for tid, body in items], ctx.label_band(),
                                            run_id=run_id)


def _version_key(body: AckRequest) -> solver_versions.VersionKey:
    name, version = body.solver_version()
    return name, version, body.version_order


def _register_versions(s: Session, bodies: list[AckRequest]) -> None:
    """Register each distinct version of the accepted acks (a lower one stays a late outcome, never
    current), after the queue took them and in sorted order: every ack transaction locks its task rows
    first, then the new versions in one order, so two of them wait for each other instead of deadlocking
    on PostgreSQL. Checked already (:func:`solver_versions.check_registrations`); a
    :class:`~curriculum.store.solver_versions.VersionError` here is a concurrent registration's."""
    for name, version, order in solver_versions.sorted_keys(_version_key(b) for b in bodies):
        solver_versions.ensure_registered(s, name, version, order, source="ack")


def _outcome(task_id: int, body: AckRequest) -> frontier_labels.TrainerOutcome:
    name, version = body.solver_version()
    sampling = body.sampling.model_dump(exclude_none=True) if body.sampling is not None else None
    return frontier_labels.TrainerOutcome(task_id, name, version, body.solved, body.n, body.errors, sampling)


def _status_routes(app: FastAPI) -> None:
    @app.get("/v1/status", tags=["status"])
    def status(ctx: Ctx) -> Any:
        """Daemon phase, cycle, heartbeat, leader, counters, degraded reasons, queue depth, active probes,
        every solver version (``frontier``) and ``following``: the followed solver names, and once per
        trainer-announced or acked name that is not followed, why and the setting that changes it
        (503 with the reason when the store does not answer)."""
        try:
            info = daemon_status(ctx.store, ctx.run_name)
            with ctx.store.session() as s:
                info["following"] = following(s, ctx.follows(s))
            return info
        except (SQLAlchemyError, StoreError) as err:
            reason = mask_secrets(str(err).splitlines()[0][:200]) if str(err) else type(err).__name__
            return JSONResponse({"detail": f"store unreachable: {reason}"}, status_code=503)

    @app.get("/healthz", tags=["status"])
    def healthz(ctx: Ctx) -> JSONResponse:
        """200 when the store answers, the daemon's heartbeat is fresh and a leader holds the run; else 503
        with the reasons. Degraded reasons are listed but do not fail the check (the daemon is alive)."""
        try:
            info = daemon_status(ctx.store, ctx.run_name, frontier=False)
        except (SQLAlchemyError, StoreError) as err:  # the store is down: that is the answer, not a 500
            reason = mask_secrets(str(err).splitlines()[0][:200]) if str(err) else type(err).__name__
            return JSONResponse({"ok": False, "problems": [f"store unreachable: {reason}"]}, status_code=503)
        problems = live_problems(info, datetime.now(UTC), ctx.heartbeat_stale_s)
        body = {"ok": not problems, "problems": problems, "heartbeat_at": info["heartbeat_at"],
                "heartbeat_age_s": info["heartbeat_age_s"], "heartbeat_stale_s": ctx.heartbeat_stale_s,
                "leader": info["leader"], "phase": info["phase"], "cycle": info["cycle"], "degraded": info["degraded"]}
        return JSONResponse(body, status_code=200 if not problems else 503)

    @app.get("/metrics", tags=["status"])
    def metrics(ctx: Ctx) -> Response:
        """Prometheus exposition of the ``propel_`` metrics."""
        if ctx.refresh_metrics is not None:  # `propel serve`: read what the daemon stored
            ctx.refresh_metrics()
        return Response(generate_latest(ctx.registry), media_type=CONTENT_TYPE_LATEST)
