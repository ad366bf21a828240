"""``propel solver announce|versions``: tell a running daemon that the solver moved to a new checkpoint."""

from __future__ import annotations

import click

from daemon.cli.tasks import api_client, url_option


@click.group("solver")
def solver_group() -> None:
    """Solver versions: announce a new checkpoint, list the known ones (over the HTTP API)."""


@solver_group.command("announce")
@click.argument("name")
@click.argument("version")
@click.option("--order", type=click.IntRange(0, 2**53), default=None,
              help="explicit order (higher = newer) for a VERSION without a step number, e.g. rc2")
@url_option
@click.pass_context
def announce(ctx: click.Context, name: str, version: str, order: int | None, url: str | None) -> None:
    """Announce VERSION of solver NAME (idempotent). The highest-ordered version becomes current: spot-checks
    are recorded against it and a sample of already-labelled tasks is re-measured on it (drift)."""
    with api_client(ctx, url) as client:  # nothing answers, or a refusal: one line naming the fix
        got = client.announce(name, version, order)
    what = "announced" if got["created"] else "already known"
    tail = "it is current" if got["is_current"] else (
        f"current stays {got['current']['version']} (order {got['current']['order']}): this one is older")
    click.echo(f"{name} {got['version']} (order {got['order']}) {what}; {tail}")
    if got.get("notice"):  # the daemon follows another solver: say so where the trainer looks
        click.echo(f"note: {got['notice']}", err=True)


@solver_group.command("versions")
@click.argument("name")
@url_option
@click.pass_context
def versions(ctx: click.Context, name: str, url: str | None) -> None:
    """List the known versions of solver NAME, oldest first, with their age (0 = current)."""
    with api_client(ctx, url) as client:
        got = client.solver_versions(name)
    for v in got["versions"]:
        mark = "*" if v["version"] == got["current"] else " "
        age = "-" if v["age"] is None else str(v["age"])
        click.echo(f"{mark} {v['version'] or '(unversioned)':<24} order {v['order']!s:<12} age {age:<4} "
                   f"{v['source']:<10} {v['registered_at']}")
