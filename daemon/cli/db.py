"""``propel db …`` (migrations) and ``propel status`` (what the store holds)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.cli.common import console, get_config
from daemon.cli.status_text import following_lines, version_lines
from daemon.config import PropelConfig, mask_url
from daemon.http.run_status import daemon_status
from migrations import current_revision, downgrade, head_revision, upgrade


def _config(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


@click.group("db")
def db_group() -> None:
    """Create and migrate the store's schema (PostgreSQL or SQLite)."""


@db_group.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Apply migrations up to REVISION (default: head)."""
    url = _config(ctx).database_url
    upgrade(url, revision)
    click.echo(f"store {mask_url(url)} is at revision {revision}")


@db_group.command("downgrade")
@click.argument("revision")
@click.pass_context
def db_downgrade(ctx: click.Context, revision: str) -> None:
    """Revert migrations down to REVISION ('base' drops every table: data is lost)."""
    url = _config(ctx).database_url
    downgrade(url, revision)
    click.echo(f"store {mask_url(url)} downgraded to {revision}")


@db_group.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the store's current revision and the newest one available."""
    url = _config(ctx).database_url
    store = Store(url)
    try:
        cur = current_revision(store)
    finally:
        store.dispose()
    click.echo(f"current: {cur or '(empty: run `propel db upgrade`)'}  head: {head_revision(url)}")


@click.command("status")
@click.pass_context
def status_command(ctx: click.Context) -> None:
    """Show what the store holds: schema revision, row counts, queue, daemon state."""
    from daemon.http.following import following, resolve_followed
    from daemon.service.settings import followed_names

    cfg = _config(ctx)
    store = Store(cfg.database_url)
    try:
        rev = current_revision(store)
        if rev is None:
            raise click.ClickException(
                f"store {mask_url(cfg.database_url)} has no schema yet: run `propel db upgrade`")
        with store.session() as sess:
            counts = repo.table_counts(sess)
            depths = repo.queue_depths(sess)
            frontier = _frontier(sess, cfg.run_name)
            follow = following(sess, resolve_followed(sess, followed_names(cfg), cfg.solver.follow_mode))
        info = daemon_status(store, cfg.run_name, frontier=False)
    finally:
        store.dispose()
    console.print(f"[bold]propel[/bold] run [cyan]{cfg.run_name}[/cyan] · domain {cfg.domain.name} · "
                  f"solver {cfg.solver.backend}", highlight=False)
    console.print(f"store  {mask_url(cfg.database_url)}  (revision {rev})", highlight=False)
    table = Table(title="rows", show_header=True)
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, n in sorted(counts.items()):
        table.add_row(name, str(n))
    console.print(table)
    queue = ", ".join(f"{k}={v}" for k, v in sorted(depths.items())) or "empty"
    console.print(f"queue  {queue}", highlight=False)
    for key, label in (("spotcheck_pace", "budget"), ("utility", "utility")):
        if info.get(key):
            console.print(f"{label}  {info[key]['line']}", highlight=False)
    _print_frontier(frontier)
    for line in following_lines(follow):
        click.echo(line)


def _frontier(sess: Any, run_name: str) -> dict[str, Any]:
    from sqlalchemy import select

    from curriculum.frontier.frontier_view import frontier_summary
    from curriculum.store.models import Run

    return frontier_summary(sess, sess.scalars(select(Run.id).where(Run.name == run_name)).first())


def _print_frontier(summary: dict[str, Any]) -> None:
    """Per solver version: labels and in-band rates (spot-checks, trainer outcomes), drift; the champion."""
    from daemon.http import frontier_panel

    console.print(frontier_panel.champion_line(summary), highlight=False)
    body = frontier_panel.rows(summary)
    if not body:
        return
    if not console.is_terminal:  # a pipe: plain lines within 80 columns, no name cut to "…"
        for line in version_lines(summary):
            click.echo(line)
        return
    table = Table(title="solver versions (* current)", show_header=True)
    for h in frontier_panel.HEADERS:
        table.add_column(h, justify="left" if h in ("solver", "version") else "right")
    for row in body:
        table.add_row(*row)
    console.print(table)
