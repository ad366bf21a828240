"""``propel check``: is the run's daemon live? Store, heartbeat, leader, API, broker — each with its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select

from curriculum.store.models import DaemonState, Run
from daemon.config import PropelConfig, mask_secrets, mask_url
from daemon.loop import health
from daemon.service.api_app import api_url
from daemon.service.settings import build_store


@dataclass
class CheckResult:
    problems: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        return ", ".join(self.facts)


def _first_line(err: BaseException) -> str:
    return mask_secrets(next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)[:200])


def check_live(cfg: PropelConfig, stale_s: float, require_api: bool, timeout_s: float = 3.0) -> CheckResult:
    """Every liveness check of the configured run (none raises: failures become ``problems``)."""
    out = CheckResult()
    now = datetime.now(UTC)
    store = build_store(cfg, pool_size=1)
    try:
        with store.session() as s:
            row = s.execute(select(DaemonState).join(Run, Run.id == DaemonState.run_id)
                            .where(Run.name == cfg.run_name)).scalars().first()
            state = None if row is None else (row.heartbeat_at, row.leader_id, row.lease_until, dict(row.counters))
    except Exception as err:
        out.problems.append(f"store {mask_url(cfg.database_url)} unreachable: {_first_line(err)}")
        return out
    finally:
        store.dispose()
    if state is None:
        out.problems.append(f"run {cfg.run_name!r} has no daemon state in {mask_url(cfg.database_url)} "
                            "(never started?)")
        return out
    beat, leader, lease_until = (_aware(state[0]), state[1], _aware(state[2]))
    out.problems += health.liveness(beat, leader, lease_until, now, stale_s)
    if beat is not None:
        out.facts.append(f"heartbeat {(now - beat).total_seconds():.1f} s ago (limit {stale_s:g} s)")
    if leader:
        out.facts.append(f"leader {leader}")
    out.degraded += [f"{d['reason']}: {d['detail']}" for d in health.summary(state[3].get("degraded", {}))]
    if require_api:
        _check_api(cfg, timeout_s, out)
    if cfg.broker.url:
        _check_broker(cfg.broker.url, timeout_s, out)
    return out


def _check_api(cfg: PropelConfig, timeout_s: float, out: CheckResult) -> None:
    import httpx

    url = f"{api_url(cfg)}/healthz"
    try:
        resp = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as err:
        out.problems.append(f"API {url} does not answer ({_first_line(err)}); a starting daemon opens it after "
                            "loading its models")
        return
    if resp.status_code not in (200, 503):
        out.problems.append(f"API {url} answered HTTP {resp.status_code}")
    else:
        out.facts.append(f"API {api_url(cfg)} answers")


def _check_broker(url: str, timeout_s: float, out: CheckResult) -> None:
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout_s) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as err:
        out.problems.append(f"broker {mask_url(url)} unreachable: {_first_line(err)}")
        return
    out.facts.append(f"broker {mask_url(url)} answers")


def _aware(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t
