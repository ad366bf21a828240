"""When the daemon runs but does less than it should: the degraded state, as pure functions.

A *degradation* has a reason (one of :data:`REASONS`), a one-line detail, the time it started and,
when known, the time it should end. The driver asks the checks below after the phase that knows
the facts (spot-check: budget, workers, broker; retrain: failing jobs; emit: backpressure), merges
the answers with :func:`merge` and keeps the result in its counters (``counters["degraded"]``),
so ``/v1/status``, ``/healthz``, ``propel check``, the ``propel_degraded{reason}`` metric and the
dashboard banner all read the same thing. :func:`merge` also returns what started and what
ended, which the driver logs once each (a warning when it starts, a warning when it ends).

Emission without labels (documented in docs/OPERATIONS.md): while spot-check labels are missing
(budget exhausted, no worker, broker unreachable) emission goes on using the probe's predictions
alone, for at most ``emission.unverified_grace_s`` (default one hour, the budget's own window);
after that only spot-check-verified tasks are emitted until labels flow again, so a probe that
drifted unwatched cannot fill the queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

BUDGET = "solver_budget_exhausted"
WORKERS = "spotcheck_workers_silent"
BROKER = "broker_unreachable"
RETRAIN = "retrain_failing"
RETRAIN_WAITING = "retrain_workers_silent"
BACKPRESSURE = "backpressure"
EMISSION_STALLED = "emission_stalled"  # daemon.loop.emission_watch
PROBES_SUSPECT = "probes_suspect"  # daemon.loop.hacking
EMISSION_PAUSED = "emission_paused"  # daemon.loop.escalation
REASONS: tuple[str, ...] = (BUDGET, WORKERS, BROKER, RETRAIN, RETRAIN_WAITING, BACKPRESSURE, EMISSION_STALLED,
                            PROBES_SUSPECT, EMISSION_PAUSED)
#: Reasons with a metric of their own (1 while degraded), which an alert rule watches: its message
#: carries the degradation's detail (the why).
ALERT_METRICS: dict[str, str] = {EMISSION_STALLED: "emission_stalled", PROBES_SUSPECT: "probes_suspect"}
#: The reasons under which spot-check labels stop arriving.
LABELS_MISSING: frozenset[str] = frozenset({BUDGET, WORKERS, BROKER})


@dataclass(frozen=True)
class Degradation:
    reason: str
    detail: str
    since: str = ""  # ISO time; filled by merge() when it starts
    until: str | None = None  # ISO time it should end by itself (the budget window), if known

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def budget_exhausted(used: int, per_hour: int, oldest_in_window: datetime | None) -> Degradation | None:
    """All of the hour's solver budget is spent: spot-checks pause until the oldest one ages out."""
    if per_hour <= 0 or used < per_hour:
        return None
    until = oldest_in_window + timedelta(hours=1) if oldest_in_window is not None else None
    when = f" until {until.strftime('%H:%M:%S')} UTC" if until else ""
    return Degradation(BUDGET, f"solver budget spent ({used:,}/{per_hour:,} tasks this hour): spot-checks "
                               f"paused{when}; emission continues on probe predictions",
                       until=_iso(until) if until else None)


def workers_silent(pending: int, pending_since: datetime | None, last_trial_at: datetime | None, now: datetime,
                   silence_s: float) -> Degradation | None:
    """Spot-checks were dispatched but no trial landed for ``silence_s``: no worker is consuming."""
    if pending <= 0 or pending_since is None or (now - pending_since).total_seconds() < silence_s:
        return None
    if last_trial_at is not None and (now - last_trial_at).total_seconds() < silence_s:
        return None
    seen = f"last trial {_iso(last_trial_at)}" if last_trial_at else "no trial yet"
    return Degradation(WORKERS, f"{pending:,} spot-check(s) pending and no solver trial for {silence_s:.0f} s "
                                f"({seen}): start `propel worker -Q spotcheck`")


def broker_unreachable(undispatched: int) -> Degradation | None:
    if undispatched <= 0:
        return None
    return Degradation(BROKER, f"{undispatched:,} spot-check(s) could not be dispatched: the broker is "
                               "unreachable; retried every cycle")


def retrain_failing(consecutive_failures: int, last_reason: str | None) -> Degradation | None:
    if consecutive_failures <= 0:
        return None
    return Degradation(RETRAIN, f"{consecutive_failures} aux-probe retrain(s) in a row failed"
                                + (f" (last: {last_reason})" if last_reason else "")
                                + ": the reward keeps its current probes")


def retrain_waiting(job: str | None, age_s: float | None, silence_s: float) -> Degradation | None:
    """A retrain job has had no outcome for ``silence_s``: no ``propel worker -Q retrain`` is consuming."""
    if job is None or age_s is None or age_s < silence_s:
        return None
    return Degradation(RETRAIN_WAITING, f"aux-probe retrain {job} has had no outcome for {age_s:,.0f} s: start "
                                        "`propel worker -Q retrain` (it is failed and retried after the broker's "
                                        "time limit + visibility timeout)")


def backpressure(ready: int, high_water_mark: int) -> Degradation | None:
    if ready < high_water_mark:
        return None
    return Degradation(BACKPRESSURE, f"queue holds {ready:,} ready tasks (high-water mark {high_water_mark:,}): "
                                     "emission waits until a trainer leases some (`propel tasks pull`, "
                                     "POST /v1/tasks/lease) or emission.high_water_mark is raised")


def emission_paused(rules: list[str], details: Mapping[str, str]) -> Degradation | None:
    """Escalated mitigations paused emission (daemon.loop.escalation) until their metric is back."""
    if not rules:
        return None
    return Degradation(EMISSION_PAUSED, "emission paused by escalation until the metric is back: "
                       + "; ".join(details.get(r, r) for r in rules))


def merge(current: Mapping[str, Mapping[str, Any]], checks: Mapping[str, Degradation | None], now: datetime
          ) -> tuple[dict[str, dict[str, Any]], list[Degradation], list[Degradation]]:
    """Apply ``checks`` (reason → degradation, or None when it does not hold) to ``current``.

    Reasons not in ``checks`` keep their state. Returns the new state, what started, what ended
    (an ongoing degradation keeps its ``since`` and takes the fresh detail)."""
    state = {k: dict(v) for k, v in current.items()}
    started: list[Degradation] = []
    ended: list[Degradation] = []
    for reason, found in checks.items():
        before = state.get(reason)
        if found is None:
            if before is not None:
                ended.append(Degradation(reason, str(before.get("detail", "")), str(before.get("since", ""))))
                del state[reason]
            continue
        since = str(before["since"]) if before is not None else _iso(now)
        entry = Degradation(reason, found.detail, since, found.until)
        state[reason] = entry.as_dict()
        if before is None:
            started.append(entry)
    return state, started, ended


def labels_missing_since(state: Mapping[str, Mapping[str, Any]]) -> datetime | None:
    """When spot-check labels stopped arriving (the earliest such degradation), if they did."""
    times = [datetime.fromisoformat(str(v["since"])) for k, v in state.items()
             if k in LABELS_MISSING and v.get("since")]
    return min(times) if times else None


def verified_only(state: Mapping[str, Mapping[str, Any]], now: datetime, grace_s: float) -> bool:
    """Emit only spot-check-verified tasks: labels have been missing for longer than ``grace_s``."""
    since = labels_missing_since(state)
    return since is not None and (now - since).total_seconds() > grace_s


def alert_details(state: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Metric name → the detail of its ongoing degradation (:data:`ALERT_METRICS`), for alert messages."""
    return {metric: str(state[reason].get("detail", "")) for reason, metric in ALERT_METRICS.items()
            if reason in state}


def summary(state: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The degraded reasons in :data:`REASONS` order, for ``/v1/status`` and ``/healthz``."""
    order = {r: i for i, r in enumerate(REASONS)}
    return [dict(v, reason=k) for k, v in sorted(state.items(), key=lambda kv: order.get(kv[0], len(order)))]


def liveness(heartbeat_at: datetime | None, leader: str | None, lease_until: datetime | None, now: datetime,
             stale_s: float) -> list[str]:
    """Why the run's daemon is not live (empty when it is): heartbeat age against ``stale_s``, a leader.

    Shared by ``/healthz`` and ``propel check``. A daemon that stopped cleanly released its lease
    (no leader); one that was killed stops beating and its heartbeat goes stale within ``stale_s``."""
    problems = []
    if heartbeat_at is None:
        problems.append("no heartbeat: the daemon never started for this run")
    else:
        age = (now - heartbeat_at).total_seconds()
        if age > stale_s:
            problems.append(f"last heartbeat {age:,.0f} s ago (limit {stale_s:g} s): the daemon is not running "
                            "or is stuck")
    if leader is None:
        problems.append("no leader: no daemon holds the run's lease (stopped, or a standby waits)")
    elif lease_until is not None and lease_until < now:
        problems.append(f"the leader's lease expired at {_iso(lease_until)}")
    return problems
