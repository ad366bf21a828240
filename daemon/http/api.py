"""The HTTP API: pull frontier tasks with leases, ack outcomes, status, health, Prometheus metrics.

Queue endpoints (``/v1/tasks/...``) require ``Authorization: Bearer $PROPEL_API_TOKEN`` when a token
is configured (compared in constant time). Bodies above ``api.max_body_bytes`` get 413; malformed
JSON or out-of-range fields get 422. Acked outcomes are stored as labels (source ``consumer``) of
the solver version that made them; they feed probe retraining, calibration and drift like
spot-check labels (:mod:`curriculum.frontier_labels`). ``/v1/solvers/...`` announces versions.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from curriculum import frontier_labels, solver_versions
from curriculum.store import queue
from curriculum.store.db import Store, StoreError
from daemon.config import mask_secrets
from daemon.http.fields import Text, VersionText
from daemon.http.run_status import daemon_status, live_problems
from daemon.http.solvers import solver_routes
from probes.band import Band

TaskId = Annotated[int, Path(ge=1, le=2**31 - 1, description="task id from the leased message")]

ACK_HTTP = {queue.AckStatus.NOT_FOUND: 404, queue.AckStatus.LEASE_LOST: 409, queue.AckStatus.NOT_LEASED: 409}


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


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(default=1, ge=1, le=1000, description="how many tasks to lease")
    lease_s: float = Field(default=600, gt=0, le=86_400, description="lease duration in seconds")
    consumer: Text = Field(min_length=1, max_length=128, description="who is leasing (for logs and status)")


class SamplingSettings(BaseModel):
    """The trainer's sampling settings for its attempts (recorded with the label when given)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(default=None, ge=0, le=100)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class AckRequest(BaseModel):
    """A trainer's outcome for one task. The single definition of an outcome: the batched ack reuses it.

    ``solver`` is a name with ``version`` given separately, or (older trainers) ``name@version``.
    ``errors`` are attempts that failed for infrastructure reasons: excluded from the count.
    """

    model_config = ConfigDict(extra="forbid")
    solved: int = Field(ge=0, le=10_000, description="attempts of the trainer's solver that solved the task")
    n: int = Field(ge=1, le=10_000, description="attempts made")
    errors: int = Field(default=0, ge=0, le=10_000, description="attempts lost to infrastructure failures "
                        "(timeouts, server errors): excluded from the count, never counted as failures")
    solver: Text = Field(min_length=1, max_length=256,
                         description="solver name (or name@version when version is not given)")
    version: VersionText | None = Field(default=None, description="the solver version that made the attempts "
                                        "(a checkpoint step such as 1200 or step-1200, or an announced string)")
    version_order: int | None = Field(default=None, ge=0, le=2**53, description="order of a version string "
                                      "with no step number (higher = newer); not needed once it was announced")
    sampling: SamplingSettings | None = Field(default=None, description="the trainer's sampling settings")
    lease_token: Text | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _counts(self) -> AckRequest:
        if self.errors > self.n:
            raise ValueError(f"errors ({self.errors}) cannot exceed n ({self.n})")
        if self.solved + self.errors > self.n:
            raise ValueError(f"solved + errors ({self.solved} + {self.errors}) cannot exceed n ({self.n})")
        if self.version is not None and "@" in self.solver:
            raise ValueError("solver must be a bare name (no '@') when version is given")
        if self.version is None and self.version_order is not None:
            raise ValueError("version_order needs version")
        return self

    def solver_version(self) -> tuple[str, str]:
        """(name, version) of the solver that made the attempts."""
        if self.version is not None:
            return self.solver, self.version
        return solver_versions.split_solver_id(self.solver)


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease_token: Text | None = Field(default=None, max_length=64)
    lease_s: float = Field(default=600, gt=0, le=86_400)


class BodyLimit(BaseHTTPMiddleware):
    """413 for bodies above the limit, by header or by streamed size."""

    def __init__(self, app: Any, limit: int) -> None:
        super().__init__(app)
        self.limit = limit

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return JSONResponse({"detail": f"request body above {self.limit} bytes"}, status_code=413)
        if request.method in ("POST", "PUT", "PATCH") and declared is None:
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > self.limit:
                    return JSONResponse({"detail": f"request body above {self.limit} bytes"}, status_code=413)
            request._body = body
        return await call_next(request)


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
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]
    _queue_routes(app)
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
    @app.post("/v1/tasks/lease", dependencies=[Auth], tags=["queue"])
    def lease(body: LeaseRequest, ctx: Ctx) -> dict[str, Any]:
        """Lease up to ``n`` frontier tasks for ``lease_s`` seconds (at-least-once delivery)."""
        with ctx.store.session() as s:
            got = queue.lease(s, body.n, body.lease_s, body.consumer, ctx.max_attempts)
        return {"tasks": [{"lease_token": x.lease_token, "lease_until": x.lease_until.isoformat(),
                           "attempts": x.attempts, "task": x.message} for x in got]}

    @app.post("/v1/tasks/{task_id}/ack", dependencies=[Auth], tags=["queue"])
    def ack(task_id: TaskId, body: AckRequest, ctx: Ctx) -> dict[str, Any]:
        """Record the trainer's outcome (idempotent: a second ack reports ``already_acked``).

        The outcome becomes a ``consumer`` label of the solver version (registered on first sight).
        """
        with ctx.store.session() as s:
            status = queue.ack(s, task_id, solved=body.solved, n=body.n,
                               solver=solver_versions.qualified_id(*body.solver_version()),
                               lease_token=body.lease_token)
            if status == queue.AckStatus.ACKED:
                store_outcome(s, ctx, task_id, body)
        if status in ACK_HTTP:
            raise HTTPException(ACK_HTTP[status], status.value)
        return {"id": task_id, "status": status.value}

    @app.post("/v1/tasks/{task_id}/nack", dependencies=[Auth], tags=["queue"])
    def nack(task_id: TaskId, body: TokenRequest, ctx: Ctx) -> dict[str, Any]:
        """Give a leased task back now (it is dead-lettered once its attempts are spent)."""
        with ctx.store.session() as s:
            status = queue.nack(s, task_id, ctx.max_attempts, body.lease_token)
        if status in ACK_HTTP:
            raise HTTPException(ACK_HTTP[status], status.value)
        return {"id": task_id, "status": "returned" if status == queue.AckStatus.ACKED else status.value}

    @app.post("/v1/tasks/{task_id}/renew", dependencies=[Auth], tags=["queue"])
    def renew(task_id: TaskId, body: TokenRequest, ctx: Ctx) -> dict[str, Any]:
        """Extend a live lease by ``lease_s`` seconds."""
        if body.lease_token is None:
            raise HTTPException(422, "lease_token is required to renew")
        with ctx.store.session() as s:
            status = queue.renew(s, task_id, body.lease_token, body.lease_s)
        if status != queue.AckStatus.ACKED:
            raise HTTPException(ACK_HTTP.get(status, 409), status.value)
        return {"id": task_id, "status": "renewed"}


def store_outcome(s: Session, ctx: ApiContext, task_id: int, body: AckRequest) -> None:
    """Register the ack's solver version (a lower one stays a late outcome, never current) and store
    the outcome as a ``consumer`` label; a version that cannot be ordered is a 422 (nothing is stored:
    the caller's transaction rolls back)."""
    name, version = body.solver_version()
    try:
        solver_versions.ensure_registered(s, name, version, body.version_order, source="ack")
    except solver_versions.VersionError as err:
        raise HTTPException(422, f"version: {err}") from None
    sampling = body.sampling.model_dump(exclude_none=True) if body.sampling is not None else None
    frontier_labels.record_trainer_outcome(s, task_id, name, version, solved=body.solved, n=body.n,
                                           errors=body.errors, band=ctx.label_band(), sampling=sampling)


def _status_routes(app: FastAPI) -> None:
    @app.get("/v1/status", tags=["status"])
    def status(ctx: Ctx) -> Any:
        """Daemon phase, cycle, heartbeat, leader, counters, degraded reasons, queue depth, active probes
        (503 with the reason when the store does not answer)."""
        try:
            return daemon_status(ctx.store, ctx.run_name)
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
