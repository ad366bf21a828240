"""``propel run``, ``propel serve`` and ``propel check``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from daemon.cli.common import get_config
from daemon.config import PropelConfig, mask_url


def _cfg(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


@click.command("run")
@click.option("--cycles", type=click.IntRange(1), default=None, help="run this many more cycles, then exit")
@click.option("--until-cycle", type=click.IntRange(1), default=None,
              help="run until the run's cycle counter reaches N (restart-friendly), then exit")
@click.option("--no-api", is_flag=True, help="do not start the HTTP API")
@click.pass_context
def run_command(ctx: click.Context, cycles: int | None, until_cycle: int | None, no_api: bool) -> None:
    """Run the daemon: RL → sample → spot-check → retrain → emit, cycle after cycle.

    With no --config this is the embedded demo: SQLite under ./.propel, the arith domain, the
    bootstrapped tiny generator, in-process spot-checks with the synthetic solver, the API on
    http://127.0.0.1:8787. State lives in the store: stop it (Ctrl-C) and start it again to resume.
    """
    from daemon.loop.progress import Progress
    from daemon.service.runtime import run

    cfg = _cfg(ctx)
    if cycles is not None and until_cycle is not None:
        raise click.UsageError("use --cycles or --until-cycle, not both")
    progress = Progress()
    code = run(cfg, cycles=cycles, until_cycle=until_cycle, serve_api=cfg.daemon.serve_api and not no_api,
               progress=progress)
    sys.exit(code)


@click.command("serve")
@click.pass_context
def serve_command(ctx: click.Context) -> None:
    """Serve the HTTP API (queue, status, metrics, dashboard) without driving cycles.

    For draining the queue while no daemon runs, or for serving consumers from a separate process.
    """
    import uvicorn

    from curriculum.store.db import Store
    from daemon.http.api import ApiContext, create_app

    cfg = _cfg(ctx)
    store = Store(cfg.database_url, pool_size=cfg.store.pool_size)
    sc = cfg.spotcheck
    app = create_app(ApiContext(store=store, run_name=cfg.run_name, token=cfg.api.token,
                                max_attempts=cfg.emission.max_attempts, band=(sc.band_lo, sc.band_hi), k=sc.k,
                                heartbeat_stale_s=cfg.daemon.heartbeat_stale_s, max_body_bytes=cfg.api.max_body_bytes))
    app.state.alert_rules = cfg.alerts.rules
    click.echo(f"API on http://{cfg.api.host}:{cfg.api.port} (store {mask_url(cfg.database_url)})")
    try:
        uvicorn.run(app, host=cfg.api.host, port=cfg.api.port, log_level="warning", access_log=False)
    finally:
        store.dispose()


@click.command("check")
@click.option("--max-age-s", type=float, default=None, help="heartbeat age limit (default: daemon.heartbeat_stale_s)")
@click.pass_context
def check_command(ctx: click.Context, max_age_s: float | None) -> None:
    """Exit 0 when the run's daemon heartbeat is fresh, 1 otherwise (for container health checks)."""
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import DaemonState, Run

    cfg = _cfg(ctx)
    limit = max_age_s if max_age_s is not None else cfg.daemon.heartbeat_stale_s
    store = Store(cfg.database_url)
    try:
        with store.session() as s:
            beat = s.scalars(select(DaemonState.heartbeat_at).join(Run, Run.id == DaemonState.run_id)
                             .where(Run.name == cfg.run_name)).first()
    except Exception as err:  # any store failure is "unhealthy", with the reason
        click.echo(f"unhealthy: store {mask_url(cfg.database_url)} unreachable: {str(err).splitlines()[0]}", err=True)
        sys.exit(1)
    finally:
        store.dispose()
    if beat is None:
        click.echo(f"unhealthy: run {cfg.run_name!r} has no heartbeat (never started?)", err=True)
        sys.exit(1)
    age = (datetime.now(UTC) - beat).total_seconds()
    if age > limit:
        click.echo(f"unhealthy: last heartbeat {age:.0f} s ago (limit {limit:.0f} s)", err=True)
        sys.exit(1)
    click.echo(f"healthy: heartbeat {age:.1f} s ago")
