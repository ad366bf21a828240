"""``propel tasks pull|ack``: lease frontier tasks from a running API and ack their outcomes;
``propel tasks import|export``: move tasks into and out of a run's queue (see ``daemon/cli/tasks_io.py``)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from daemon.cli.common import get_config
from daemon.config import PropelConfig

if TYPE_CHECKING:
    from propel_sdk.client import PropelClient

#: Outcomes per ``POST /v1/tasks/ack`` request.
ACK_BATCH = 500


def _cfg(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


def api_url(cfg: PropelConfig, url: str | None) -> str:
    """``--url``, else the configured API address (a wildcard host means this machine)."""
    host = "127.0.0.1" if cfg.api.host in ("0.0.0.0", "::") else cfg.api.host
    return (url or f"http://{host}:{cfg.api.port}").rstrip("/")


@contextmanager
def api_client(ctx: click.Context, url: str | None) -> Iterator[PropelClient]:
    """A client of the API; a refused request (e.g. the token) ends in one line saying what to do
    (exit 1). When nothing answers, the root group's one line names the URL (``daemon.cli.main``): a
    one-shot command does not retry (a trainer's client does)."""
    from propel_sdk.client import PropelClient, PropelClientError

    cfg = _cfg(ctx)
    base = api_url(cfg, url)
    token = os.environ.get("PROPEL_API_TOKEN") or cfg.api.token
    try:
        with PropelClient(base, token=token, max_retries=0) as client:
            yield client
    except PropelClientError as err:
        hint = " (set PROPEL_API_TOKEN to the API's token)" if err.status == 401 else ""
        click.echo(f"error: {base} refused the request: {err}{hint}", err=True)
        sys.exit(1)


url_option = click.option("--url", default=None, help="API base URL (default: from api.host/api.port)")


@click.group("tasks")
def tasks_group() -> None:
    """Pull frontier tasks and ack their outcomes (over the HTTP API); import and export tasks."""


@tasks_group.command("pull")
@click.option("-n", type=click.IntRange(1, 100_000), default=64, show_default=True, help="tasks to lease")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSONL file to write")
@click.option("--lease-s", type=click.FloatRange(1), default=3600, show_default=True)
@click.option("--consumer", default=lambda: f"cli-{os.getpid()}", help="consumer name shown in status")
@url_option
@click.pass_context
def pull(ctx: click.Context, n: int, out: Path, lease_s: float, consumer: str, url: str | None) -> None:
    """Lease up to N tasks and write them, one JSON object per line, with their lease tokens."""
    from propel_sdk.client import LeasedTask

    got: list[LeasedTask] = []
    with api_client(ctx, url) as client:
        while len(got) < n:
            batch = client.lease(min(1000, n - len(got)), lease_s, consumer)
            if not batch:
                break
            got += batch
    with out.open("w", encoding="utf-8") as fh:
        for t in got:
            fh.write(json.dumps({"lease_token": t.lease_token, "lease_until": t.lease_until, **t.message}) + "\n")
    click.echo(f"leased {len(got)} task(s) for {lease_s:.0f} s → {out}")


def read_outcomes(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Outcome rows ``(line number, row)``; every bad row is reported by line, then exit 2."""
    rows, errors = [], []
    need = ("id", "solved", "n", "solver", "lease_token")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                missing = [k for k in need if not isinstance(row, dict) or k not in row]
                if missing:
                    raise ValueError(f"missing {', '.join(missing)}")
                rows.append((lineno, {"id": int(row["id"]), "solved": int(row["solved"]), "n": int(row["n"]),
                                      "solver": str(row["solver"]), "lease_token": str(row["lease_token"]),
                                      "errors": int(row.get("errors", 0)), "version": row.get("version"),
                                      "version_order": row.get("version_order"), "sampling": row.get("sampling")}))
            except (ValueError, TypeError) as err:
                errors.append(f"{path}:{lineno}: bad outcome row ({err}); need {', '.join(need)}")
    if errors:
        for e in errors[:50]:
            click.echo(e, err=True)
        if len(errors) > 50:
            click.echo(f"… and {len(errors) - 50} more bad rows", err=True)
        sys.exit(2)
    return rows


@tasks_group.command("ack")
@click.argument("outcomes", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@url_option
@click.pass_context
def ack(ctx: click.Context, outcomes: Path, url: str | None) -> None:
    """Ack outcomes from a JSONL file of {"id", "solved", "n", "solver", "lease_token"} (as `pull` wrote
    the token) plus optional "errors", "version", "version_order", "sampling", in batches; a refused
    row is reported by line number with the reason."""
    from propel_sdk.client import Ack

    rows = read_outcomes(outcomes)
    counts: dict[str, int] = {}
    with api_client(ctx, url) as client:
        for i in range(0, len(rows), ACK_BATCH):
            chunk = rows[i:i + ACK_BATCH]
            statuses = client.ack_many([Ack(r["id"], r["solved"], r["n"], r["solver"], r["lease_token"], r["errors"],
                                            r["version"], r["version_order"], r["sampling"]) for _, r in chunk])
            for lineno, r in chunk:
                st = statuses[r["id"]]
                counts[st] = counts.get(st, 0) + 1
                if st not in ("acked", "late", "already_acked"):
                    click.echo(f"{outcomes}:{lineno}: task {r['id']}: {st}", err=True)
    refused = sum(v for k, v in counts.items() if k not in ("acked", "late", "already_acked"))
    click.echo(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to ack")
    if refused:
        sys.exit(1)
