"""The served mix of a run's queue, by the solver each task was selected for: what a trainer is fed.

``GET /v1/tasks/stats`` and ``propel tasks stats`` answer, per solver: task count by state and domain,
topics, the probes' predicted in-band probability (quantiles and 0.2-wide bins), the solver prompt's
length in characters, and the extras its domain describes (``mix_features``: for arith the operator
count, the operator kinds and the answer's digits). Over the newest ``limit`` rows of the chosen states.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.params import Depends as DependsParam
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from curriculum.domains.base import Task, get_domain
from curriculum.store.models import QueueItem, TaskRow
from daemon.http.fields import Text

SERVED_STATES = ("ready", "leased", "acked")  # on offer or served; stale and dead never reach a trainer
QUANTILES = (("min", 0.0), ("p10", 0.1), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75), ("p90", 0.9), ("max", 1.0))
BINS = (0.2, 0.4, 0.6, 0.8, 1.0)
TOP_TOPICS = 20

Features = Callable[[Task], dict[str, list[str]]]


def quantiles(values: Sequence[float]) -> dict[str, float] | None:
    """Nearest-rank quantiles of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    last = len(ordered) - 1
    return {name: ordered[round(q * last)] for name, q in QUANTILES}


def bins(values: Iterable[float]) -> dict[str, int]:
    """Counts per 0.2-wide bin of a probability: ``"0.0-0.2"`` … ``"0.8-1.0"`` (upper edge included in the last)."""
    out = {f"{hi - 0.2:.1f}-{hi:.1f}": 0 for hi in BINS}
    for v in values:
        hi = next(h for h in BINS if v < h or h == BINS[-1])
        out[f"{hi - 0.2:.1f}-{hi:.1f}"] += 1
    return out


def _top(counts: Counter[str], n: int) -> dict[str, int]:
    top = dict(counts.most_common(n))
    rest = sum(counts.values()) - sum(top.values())
    return {**top, **({"(other)": rest} if rest else {})}


@dataclass
class _Mix:
    states: Counter[str] = field(default_factory=Counter)
    domains: Counter[str] = field(default_factory=Counter)
    topics: Counter[str] = field(default_factory=Counter)
    predicted: list[float] = field(default_factory=list)
    prompt_chars: list[float] = field(default_factory=list)
    features: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, q: Row[Any], task: Task, features: Features | None) -> None:
        self.states[q.state] += 1
        self.domains[task.domain] += 1
        self.topics[q.topic or "(none)"] += 1
        if q.predicted_in_band is not None:
            self.predicted.append(float(q.predicted_in_band))
        prompt = q.message.get("solver_prompt") if isinstance(q.message, dict) else None
        self.prompt_chars.append(float(len(prompt if isinstance(prompt, str) else task.text)))
        for name, values in (features(task) if features else {}).items():
            self.features.setdefault(name, Counter()).update(values)

    def answer(self, solver: str | None) -> dict[str, Any]:
        return {"solver": solver, "tasks": sum(self.states.values()), "states": dict(self.states),
                "domains": dict(self.domains), "topics": _top(self.topics, TOP_TOPICS),
                "predicted_in_band": {"quantiles": quantiles(self.predicted), "bins": bins(self.predicted)},
                "prompt_chars": quantiles(self.prompt_chars),
                "features": {k: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
                             for k, c in sorted(self.features.items())}}


def _features_of(name: str, cache: dict[str, Features | None]) -> Features | None:
    """The domain's ``mix_features`` (None for a domain without one, or one that cannot be built bare)."""
    if name not in cache:
        try:
            cache[name] = getattr(get_domain(name), "mix_features", None)
        except Exception:  # a domain needing options or files just has no extras here
            cache[name] = None
    return cache[name]


def served_mix(sess: Session, run_id: int, states: Sequence[str] = SERVED_STATES, solver: str | None = None,
               limit: int = 10_000) -> dict[str, Any]:
    """The mix of the run's newest ``limit`` queue rows in ``states`` (of ``solver`` only when given),
    one entry per target solver (``null``: selected for no particular solver)."""
    q = (select(QueueItem.state, QueueItem.topic, QueueItem.predicted_in_band, QueueItem.solver, QueueItem.message,
                TaskRow.domain, TaskRow.text).join(TaskRow, TaskRow.id == QueueItem.task_id)
         .where(QueueItem.run_id == run_id, QueueItem.state.in_(list(states)))
         .order_by(QueueItem.enqueued_at.desc(), QueueItem.id.desc()).limit(limit))
    if solver is not None:
        q = q.where(QueueItem.solver == solver)
    mixes: dict[str | None, _Mix] = {}
    cache: dict[str, Features | None] = {}
    for row in sess.execute(q):  # the task's text is what the domain describes (no payload is read)
        task = Task(domain=row.domain, text=row.text)
        mixes.setdefault(row.solver, _Mix()).add(row, task, _features_of(row.domain, cache))
    by = sorted(mixes.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    return {"states": list(states), "limit": limit, "tasks": sum(sum(m.states.values()) for m in mixes.values()),
            "solvers": [m.answer(name) for name, m in by]}


def stats_route(app: FastAPI, auth: DependsParam) -> None:
    @app.get("/v1/tasks/stats", dependencies=[auth], tags=["queue"])
    def stats(request: Request,
              state: Annotated[list[Literal["ready", "leased", "acked", "dead", "stale"]] | None, Query()] = None,
              solver: Annotated[Text | None, Query(min_length=1, max_length=256)] = None,
              limit: Annotated[int, Query(ge=1, le=1_000_000)] = 10_000) -> dict[str, Any]:
        """The served mix by target solver: states, domains, topics, predicted in-band (quantiles, bins),
        solver-prompt length and the domain's extras (arith: operators, operator kinds, answer digits),
        over the newest ``limit`` rows in ``state`` (default: ready, leased, acked)."""
        ctx = request.app.state.ctx
        states = tuple(state or SERVED_STATES)
        with ctx.store.session() as s:
            run_id = ctx.resolve_run(s)
            if run_id is None:
                return {"states": list(states), "limit": limit, "tasks": 0, "solvers": []}
            return served_mix(s, run_id, states, solver, limit)
