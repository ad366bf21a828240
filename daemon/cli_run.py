"""``propel run``, ``propel check`` and ``propel tasks pull|ack``."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click

from daemon.cli_common import get_config
from daemon.config import PropelConfig, mask_url


def _cfg(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


def start_api_thread(cfg: PropelConfig, app: object) -> Callable[[], None]:
    """Serve ``app`` with uvicorn in a background thread; returns a function that stops it."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=cfg.api.host, port=cfg.api.port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True, name="propel-api")
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return stop


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
    from daemon.progress import Progress
    from daemon.runtime import run

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
    from daemon.api import ApiContext, create_app

    cfg = _cfg(ctx)
    store = Store(cfg.database_url)
    sc = cfg.spotcheck
    app = create_app(ApiContext(store=store, run_name=cfg.run_name, token=cfg.api.token,
                                max_attempts=cfg.emission.max_attempts, band=(sc.band_lo, sc.band_hi), k=sc.k,
                                heartbeat_stale_s=cfg.daemon.heartbeat_stale_s, max_body_bytes=cfg.api.max_body_bytes))
    app.state.alert_rules = cfg.alerts.rules
    click.echo(f"API on http://{cfg.api.host}:{cfg.api.port} (store {mask_url(cfg.database_url)})")
    try:
        uvicorn.run(app, host=cfg.api.host, port=cfg.api.port, log_level="warning")
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


def _client(cfg: PropelConfig, url: str | None) -> object:
    from workers.client import PropelClient

    host = "127.0.0.1" if cfg.api.host in ("0.0.0.0", "::") else cfg.api.host
    token = os.environ.get("PROPEL_API_TOKEN") or cfg.api.token
    return PropelClient(url or f"http://{host}:{cfg.api.port}", token=token)


@click.group("tasks")
def tasks_group() -> None:
    """Pull frontier tasks from a running daemon and ack their outcomes (over the HTTP API)."""


@tasks_group.command("pull")
@click.option("-n", type=click.IntRange(1, 100_000), default=64, show_default=True, help="tasks to lease")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSONL file to write")
@click.option("--lease-s", type=click.FloatRange(1), default=3600, show_default=True)
@click.option("--consumer", default=lambda: f"cli-{os.getpid()}", help="consumer name shown in status")
@click.option("--url", default=None, help="API base URL (default: from api.host/api.port)")
@click.pass_context
def pull(ctx: click.Context, n: int, out: Path, lease_s: float, consumer: str, url: str | None) -> None:
    """Lease up to N tasks and write them, one JSON object per line, with their lease tokens."""
    from workers.client import LeasedTask, PropelClient, PropelClientError

    client = _client(_cfg(ctx), url)
    assert isinstance(client, PropelClient)
    got: list[LeasedTask] = []
    try:
        while len(got) < n:
            batch = client.lease(min(1000, n - len(got)), lease_s, consumer)
            if not batch:
                break
            got += batch
    except PropelClientError as err:
        raise click.ClickException(str(err)) from None
    finally:
        client.close()
    with out.open("w", encoding="utf-8") as fh:
        for t in got:
            fh.write(json.dumps({"lease_token": t.lease_token, "lease_until": t.lease_until, **t.message}) + "\n")
    click.echo(f"leased {len(got)} task(s) for {lease_s:.0f} s → {out}")


@tasks_group.command("ack")
@click.argument("outcomes", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--url", default=None, help="API base URL (default: from api.host/api.port)")
@click.pass_context
def ack(ctx: click.Context, outcomes: Path, url: str | None) -> None:
    """Ack outcomes from a JSONL file of {"id", "solved", "n", "solver", optional "lease_token"}."""
    from workers.client import PropelClient, PropelClientError

    client = _client(_cfg(ctx), url)
    assert isinstance(client, PropelClient)
    done = failed = 0
    with client, outcomes.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                client.ack(int(row["id"]), solved=int(row["solved"]), n=int(row["n"]), solver=str(row["solver"]),
                           lease_token=row.get("lease_token"))
                done += 1
            except (ValueError, KeyError, TypeError) as err:
                raise click.UsageError(
                    f"{outcomes}:{lineno}: bad outcome row ({err!r}); need id, solved, n, solver") from None
            except PropelClientError as err:
                click.echo(f"{outcomes}:{lineno}: task {row.get('id')}: {err}", err=True)
                failed += 1
    click.echo(f"acked {done}, refused {failed}")
    if failed:
        sys.exit(1)
