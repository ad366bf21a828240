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


#: Statuses of a row whose outcome is stored (``already_acked``: by an earlier run of the same file).
STORED = ("acked", "late", "already_acked")
OUTCOME_FIELDS = ("id", "solved", "n", "solver", "lease_token", "errors", "version", "version_order", "sampling")


def read_outcomes(path: Path) -> tuple[list[tuple[int, Any]], list[str]]:
    """Outcome rows ``(line number, AckItem)`` checked with the API's own model, and one error line
    (``FILE:LINE: …``) per row that cannot be sent: not JSON, a missing or bad field, a task repeated."""
    from pydantic import ValidationError

    from daemon.http.outcomes import AckItem

    rows: list[tuple[int, Any]] = []
    errors: list[str] = []
    first: dict[int, int] = {}
    need = ("id", "solved", "n", "solver", "lease_token")
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                missing = [k for k in need if not isinstance(row, dict) or k not in row]
                if missing:
                    raise ValueError(f"missing {', '.join(missing)}")
                item = AckItem.model_validate({k: row[k] for k in OUTCOME_FIELDS if row.get(k) is not None})
            except ValidationError as err:
                e = err.errors()[0]
                where = ".".join(str(p) for p in e.get("loc", ())) or "row"
                errors.append(f"{path}:{lineno}: bad outcome row ({where}: "
                              f"{str(e.get('msg', '')).removeprefix('Value error, ')})")
                continue
            except ValueError as err:
                errors.append(f"{path}:{lineno}: bad outcome row ({err}); need {', '.join(need)}")
                continue
            if item.id in first:
                errors.append(f"{path}:{lineno}: task {item.id} was already given on line {first[item.id]}; "
                              "each task is acked once (this row was not sent)")
                continue
            first[item.id] = lineno
            rows.append((lineno, item))
    return rows, errors


@tasks_group.command("ack")
@click.argument("outcomes", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@url_option
@click.pass_context
def ack(ctx: click.Context, outcomes: Path, url: str | None) -> None:
    """Ack outcomes from a JSONL file of {"id", "solved", "n", "solver", "lease_token"} (as `pull` wrote
    the token) plus optional "errors", "version", "version_order", "sampling", in batches. Every row
    is sent or refused on its own: a refused row (bad, repeated, or refused by the API) is reported
    by line number with the reason, the other rows are stored, and the exit code is 1 when any row
    was refused (0 when all are stored)."""
    from propel_sdk.client import PropelClientError

    rows, errors = read_outcomes(outcomes)
    for e in errors:
        click.echo(e, err=True)
    counts: dict[str, int] = {"invalid": len(errors)} if errors else {}
    with api_client(ctx, url) as client:
        for i in range(0, len(rows), ACK_BATCH):
            chunk = rows[i:i + ACK_BATCH]
            try:
                statuses = _send(client, chunk)
            except PropelClientError as err:
                if err.status == 401:
                    raise  # every later chunk would be refused too: one line from api_client
                click.echo(f"{outcomes}:{chunk[0][0]}-{chunk[-1][0]}: {len(chunk)} row(s) refused by the API: {err}",
                           err=True)
                counts["refused"] = counts.get("refused", 0) + len(chunk)
                continue
            for lineno, item in chunk:
                st = statuses[item.id]
                counts[st] = counts.get(st, 0) + 1
                if st not in STORED:
                    click.echo(f"{outcomes}:{lineno}: task {item.id}: {st}{_why(st)}", err=True)
    _summary(counts, len(rows) + len(errors))


def _send(client: PropelClient, chunk: list[tuple[int, Any]]) -> dict[int, str]:
    from propel_sdk.client import Ack

    return client.ack_many([Ack(r.id, r.solved, r.n, r.solver, r.lease_token, r.errors, r.version, r.version_order,
                                r.sampling.model_dump(exclude_none=True) if r.sampling else None)
                            for _, r in chunk])


def _why(status: str) -> str:
    return {"lease_lost": " (another consumer took or acked the task: this outcome was not stored)",
            "not_leased": " (the task is not leased: it was given back or dead-lettered)",
            "not_found": " (no such task in the API's run)",
            "invalid": " (the API could not register its version: give version_order, or the order the version "
                       "was announced with)"}.get(status, "")


def _summary(counts: dict[str, int], total: int) -> None:
    """The counts per status; exit 1 when any row was refused."""
    click.echo(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to ack")
    refused = sum(v for k, v in counts.items() if k not in STORED)
    if refused:
        click.echo(f"error: {refused} of {total} row(s) refused (listed above by line); the other "
                   f"{total - refused} are stored", err=True)
        sys.exit(1)
