"""``propel run``, ``propel serve`` and ``propel check``."""

from __future__ import annotations

import sys

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
@click.option("--domain", "domain", type=click.Choice(["arith", "azr", "math", "swe"]), default=None,
              help="run this domain (overrides domain.name; the domain's defaults fill what the config leaves "
              "unset: swe = tiny spec generator + synthetic SWE solver on CPU, see docs/SWE.md)")
@click.pass_context
def run_command(ctx: click.Context, cycles: int | None, until_cycle: int | None, no_api: bool,
                domain: str | None) -> None:
    """Run the daemon: RL → sample → spot-check → retrain → emit, cycle after cycle.

    With no --config this is the embedded demo: SQLite under ./.propel, the arith domain, the
    bootstrapped tiny generator, in-process spot-checks with the synthetic solver, the API on
    http://127.0.0.1:8787. State lives in the store: stop it (Ctrl-C) and start it again to resume.
    """
    from daemon.loop.progress import Progress
    from daemon.service.runtime import run

    cfg = _cfg(ctx)
    if domain is not None:
        from daemon.config import ConfigError, with_domain

        try:
            cfg = with_domain(cfg, domain)
        except ConfigError as err:
            raise click.UsageError(str(err)) from None
    if cycles is not None and until_cycle is not None:
        raise click.UsageError("use --cycles or --until-cycle, not both")
    progress = Progress(json_mode=ctx.ensure_object(dict).get("log_format") == "json")
    code = run(cfg, cycles=cycles, until_cycle=until_cycle, serve_api=cfg.daemon.serve_api and not no_api,
               progress=progress)
    sys.exit(code)


@click.command("serve")
@click.pass_context
def serve_command(ctx: click.Context) -> None:
    """Serve the HTTP API (queue, status, health, metrics, dashboard) without driving cycles.

    For draining the queue while no daemon runs, or for serving consumers from a separate process.
    /metrics shows the same propel_ series as the daemon's own API, read back from the store.
    """
    import uvicorn
    from sqlalchemy import text

    from daemon.http.store_metrics import StoreMetrics
    from daemon.ops.metrics import build_metrics
    from daemon.service.api_app import build_api_app
    from daemon.service.heap import freeze_startup_heap
    from daemon.service.settings import build_store

    cfg = _cfg(ctx)
    store = build_store(cfg)
    with store.session() as s:  # an unreachable store fails now, in one line (the root group words it)
        s.execute(text("SELECT 1"))
    metrics = build_metrics()
    app = build_api_app(cfg, store, metrics, refresh_metrics=StoreMetrics(store, cfg.run_name, metrics).refresh)
    freeze_startup_heap("propel serve")
    click.echo(f"API on http://{cfg.api.host}:{cfg.api.port} (store {mask_url(cfg.database_url)})")
    try:
        uvicorn.run(app, host=cfg.api.host, port=cfg.api.port, log_level="warning", access_log=False)
    finally:
        store.dispose()


@click.command("check")
@click.option("--max-age-s", type=float, default=None, help="heartbeat age limit (default: daemon.heartbeat_stale_s)")
@click.option("--no-api", is_flag=True, help="do not require the HTTP API to answer (default: required when "
              "daemon.serve_api is on)")
@click.option("--sandbox", "show_sandbox", is_flag=True,
              help="also print what the sandbox backend of this host contains and what it lacks")
@click.pass_context
def check_command(ctx: click.Context, max_age_s: float | None, no_api: bool, show_sandbox: bool) -> None:
    """Exit 0 when the run's daemon is live, 1 with the reasons otherwise (for container health checks).

    Live: the store answers, the heartbeat is younger than daemon.heartbeat_stale_s (30 s by default),
    a leader holds the run, the API answers /healthz (when daemon.serve_api) and the broker accepts a
    connection (when broker.url is set). Degraded reasons are printed but do not fail the check.
    --sandbox prints the containment of the sandbox backend generated code runs in (the rlimit
    fallback, used where bubblewrap is missing, lacks namespaces: it is listed line by line).
    """
    from daemon.service.health_check import check_live

    cfg = _cfg(ctx)
    if show_sandbox:
        from curriculum.sandbox.backends import get_sandbox
        from curriculum.sandbox.containment import format_containment

        click.echo(format_containment(get_sandbox(str(cfg.domain.options.get("sandbox", "auto")))))
    limit = max_age_s if max_age_s is not None else cfg.daemon.heartbeat_stale_s
    result = check_live(cfg, limit, require_api=cfg.daemon.serve_api and not no_api)
    if result.problems:  # the verdict first: a stopped daemon's last degraded reasons come after it
        click.echo("unhealthy: " + "; ".join(result.problems), err=True)
    for line in result.degraded:
        click.echo(f"degraded: {line}", err=True)
    if result.problems:
        sys.exit(1)
    click.echo(f"healthy: {result.summary}")
