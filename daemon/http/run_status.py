"""What ``/v1/status``, ``/healthz``, the dashboard and ``propel status`` report about a run's daemon."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from curriculum.frontier.frontier_view import frontier_summary
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, Run
from daemon.loop import health, pacing
from daemon.loop.utility import UtilityView


def daemon_status(store: Store, run_name: str, frontier: bool = True) -> dict[str, Any]:
    """What ``/v1/status`` and ``propel status`` report for a run (queue depths of that run only;
    ``frontier``: the per-solver-version view, which reads the run's labels — health checks skip it)."""
    from sqlalchemy import select

    with store.session() as s:
        run_id = s.scalars(select(Run.id).where(Run.name == run_name)).first()
        state = s.scalars(select(DaemonState).where(DaemonState.run_id == run_id)).first() if run_id else None
        depths = repo.queue_depths(s, run_id) if run_id else {}
        active = repo.active_probes(s, run_id) if run_id else []
        probes = [{"id": p.id, "name": p.name, "role": p.role} for p in active]
        versions = frontier_summary(s, run_id) if frontier else None
    beat = _aware(state.heartbeat_at) if state and state.heartbeat_at else None
    lease_until = _aware(state.lease_until) if state and state.lease_until else None
    counters = dict(state.counters) if state else {}
    return {
        "run": run_name, "phase": state.phase if state else None, "cycle": state.cycle if state else 0,
        "counters": counters, "heartbeat_at": beat.isoformat() if beat else None,
        "heartbeat_age_s": round((datetime.now(UTC) - beat).total_seconds(), 3) if beat else None,
        "leader": state.leader_id if state else None, "lease_until": lease_until.isoformat() if lease_until else None,
        "degraded": health.summary(counters.get("degraded", {})), "queue": depths, "active_probes": probes,
        "spotcheck_pace": spotcheck_pace(counters), "utility": _utility(counters),
        **({"frontier": versions} if frontier else {}),
    }


def spotcheck_pace(counters: dict[str, Any]) -> dict[str, Any] | None:
    """The spot-check budget's pace and what is left (:func:`daemon.loop.pacing.summary`), or None
    before the first spot-check phase (or from a state that cannot be read)."""
    stored = counters.get("spot_bucket")
    if not stored:
        return None
    try:
        bucket = pacing.Bucket.model_validate(stored)
    except ValueError:
        return None
    info = pacing.summary(bucket, datetime.now(UTC))
    return {**info, "line": pacing.describe(info)}


def _utility(counters: dict[str, Any]) -> dict[str, Any] | None:
    """Predicted and verified utility of the last spot-check phase (``unverified`` when no recent label)."""
    stored = counters.get("utility")
    if not stored:
        return None
    try:
        return UtilityView.model_validate(stored).as_status()
    except ValueError:
        return None


def _aware(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def _when(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def live_problems(info: dict[str, Any], now: datetime, stale_s: float) -> list[str]:
    """:func:`daemon.loop.health.liveness` of a :func:`daemon_status` answer."""
    return health.liveness(_when(info["heartbeat_at"]), info["leader"], _when(info.get("lease_until")), now, stale_s)
