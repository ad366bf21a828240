"""``propel tasks pull|ack``: lease frontier tasks from a running daemon and ack their outcomes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from daemon.cli.common import get_config
from daemon.config import PropelConfig


def _cfg(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


def _client(cfg: PropelConfig, url: str | None) -> object:
    from propel_sdk.client import PropelClient

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
    from propel_sdk.client import LeasedTask, PropelClient, PropelClientError

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
    """Ack outcomes from a JSONL file of {"id", "solved", "n", "solver"} plus optional "errors",
    "version", "version_order", "sampling", "lease_token"."""
    from propel_sdk.client import PropelClient, PropelClientError

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
                           lease_token=row.get("lease_token"), errors=int(row.get("errors", 0)),
                           version=row.get("version"), version_order=row.get("version_order"),
                           sampling=row.get("sampling"))
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
