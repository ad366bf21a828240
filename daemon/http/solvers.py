"""Solver-version routes: a trainer announces each new checkpoint of its solver.

``POST /v1/solvers/{name}/versions`` ``{"version": "step-1200"}`` (or ``{"version": "rc2",
"order": 7}`` for a string without a step number) registers the version, idempotently; the
highest-ordered version is *current*: spot-checks dispatched from then on are recorded against it
(the leader reads it at every dispatch, so the spot-check endpoint's version changes without a
restart), and the driver re-measures a sample of labelled tasks against it (drift). A version lower
than the current one is kept (its labels are late outcomes) but never becomes current.
``GET /v1/solvers/{name}/versions`` lists them with their age.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.params import Depends as DependsParam
from pydantic import BaseModel, ConfigDict, Field

from curriculum.frontier.followed import follows_line
from curriculum.store import solver_versions
from curriculum.store.db import Store
from daemon.http.fields import VersionText, printable
from daemon.http.following import notice

NamePath = Annotated[str, PathParam(min_length=1, max_length=256, pattern=r"^[^@\s/][^@\s]*$",
                                    description="solver name (no '@' or whitespace; '/' allowed inside, "
                                    "e.g. openai:Qwen/Qwen2.5-3B-Instruct)")]


class AnnounceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: VersionText
    order: int | None = Field(default=None, ge=0, le=solver_versions.MAX_ORDER,
                              description="explicit order (higher = newer); default: the step number in version")


def _version(v: solver_versions.SolverVersion, ages: dict[str, int | None]) -> dict[str, Any]:
    return {"version": v.version, "order": v.order, "source": v.source, "age": ages.get(v.version),
            "registered_at": v.created_at.isoformat()}


def _printable_name(name: str) -> str:
    try:
        return printable(name)  # same NUL / surrogate check as bodies
    except ValueError as err:
        raise HTTPException(422, f"name: {err}") from None


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def solver_routes(app: FastAPI, auth: DependsParam) -> None:
    @app.post("/v1/solvers/{name:path}/versions", dependencies=[auth], tags=["solvers"])
    def announce(name: NamePath, body: AnnounceRequest, request: Request) -> dict[str, Any]:
        """Announce a version of solver ``name`` (idempotent; registers an unknown name). ``followed``:
        whether this daemon follows the name; when not, ``notice`` says so and names the setting."""
        name = _printable_name(name)
        too_long = solver_versions.solver_id_problem(name, body.version)
        if too_long:  # its acks and labels could never be stored (#37.3)
            raise HTTPException(422, f"version: {too_long}")
        with _store(request).session() as s:
            try:
                got = solver_versions.register(s, name, body.version, body.order, source="announce")
            except solver_versions.VersionError as err:
                raise HTTPException(422, f"version: {err}") from None
            ages = solver_versions.ages(solver_versions.versions(s, name))
            followed = request.app.state.ctx.follows(s)
        request.app.state.ctx.notices.once([name], followed)
        line = notice(name, followed)
        return {"solver": name, "created": got.created, "is_current": got.is_current,
                **_version(got.version, ages), "current": _version(got.current, ages),
                "followed": line is None, **({"notice": line} if line else {}),
                **({"following": follows_line(followed)} if followed else {})}

    @app.get("/v1/solvers/{name:path}/versions", dependencies=[auth], tags=["solvers"])
    def list_versions(name: NamePath, request: Request) -> dict[str, Any]:
        """Every known version of ``name``, oldest first, with its age (0 = current)."""
        name = _printable_name(name)
        with _store(request).session() as s:
            known = solver_versions.versions(s, name)
            top = solver_versions.current(s, name)
        if not known:
            raise HTTPException(404, f"no solver named {name!r}")
        ages = solver_versions.ages(known)
        return {"solver": name, "current": top.version if top else None,
                "versions": [_version(v, ages) for v in known]}
