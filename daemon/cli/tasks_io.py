"""``propel tasks import FILE`` and ``propel tasks export``: tasks into and out of a run's queue.

Import reads JSONL records (:class:`propel_sdk.schema.TaskRecord`: a frontier-task message plus the
generator text), validates every line first (each bad line is reported with its number and nothing
is written), drops duplicates by domain + content hash, and stores and queues the rest for the run
in one transaction. Export writes a run's queue rows (filtered by state, topic, domain and enqueue
time) as JSONL records that import accepts again, or as Parquet when the file ends in ``.parquet``
and ``pyarrow`` is installed; from the store, or with ``--api URL`` from a running API.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import click

from daemon.cli.common import get_config
from daemon.cli.tasks import api_client, api_url, tasks_group
from daemon.config import mask_url

MAX_REPORTED = 50


def read_records(path: Path) -> tuple[list[tuple[int, Any]], list[str]]:
    """Valid records ``(line, TaskRecord)`` and one error line per bad row (``FILE:LINE: …``)."""
    from pydantic import ValidationError

    from curriculum.domains.base import available_domains
    from propel_sdk.schema import TaskRecord

    domains = set(available_domains())
    records, errors = [], []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = TaskRecord.model_validate_json(line)
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "line"
                more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
                errors.append(f"{path}:{lineno}: {where}: {first['msg']}{more}")
                continue
            if rec.domain not in domains:
                errors.append(f"{path}:{lineno}: domain: unknown domain {rec.domain!r} "
                              f"(known: {', '.join(sorted(domains))})")
                continue
            records.append((lineno, rec))
    return records, errors


def to_items(records: Iterable[tuple[int, Any]]) -> tuple[list[Any], int]:
    """Import items, first occurrence of each domain + content hash; and how many were dropped."""
    from curriculum.domains.base import Task
    from curriculum.store.repo import NewTask
    from curriculum.store.transfer import ImportItem

    items, seen, dropped = [], set(), 0
    for _, rec in records:
        task = Task(rec.domain, rec.text or rec.solver_prompt)
        if (rec.domain, task.content_hash) in seen:
            dropped += 1
            continue
        seen.add((rec.domain, task.content_hash))
        message = rec.model_dump(mode="json", exclude={"text"})
        items.append(ImportItem(NewTask(domain=rec.domain, content_hash=task.content_hash, text=task.text,
                                        valid=True, payload=dict(rec.grading), topic=rec.topic,
                                        generator_step=rec.provenance.generator_step,
                                        adapter_hash=rec.provenance.adapter_hash), message))
    return items, dropped


@tasks_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--run", "run_name", default=None, help="run whose queue gets the tasks (default: run_name)")
@click.option("--create-run", is_flag=True, help="create the run when the store has none of that name")
@click.option("--dry-run", is_flag=True, help="validate and count only; write nothing")
@click.pass_context
def import_command(ctx: click.Context, file: Path, run_name: str | None, create_run: bool, dry_run: bool) -> None:
    """Queue the tasks of a JSONL file (one TaskRecord per line) for a run, all or nothing."""
    from sqlalchemy import select

    from curriculum.store import repo
    from curriculum.store.db import Store
    from curriculum.store.models import Run
    from curriculum.store.transfer import import_tasks

    cfg = get_config(ctx)
    run_name = run_name or cfg.run_name
    records, errors = read_records(file)
    if errors:
        for e in errors[:MAX_REPORTED]:
            click.echo(e, err=True)
        more = f" (first {MAX_REPORTED} shown)" if len(errors) > MAX_REPORTED else ""
        click.echo(f"error: {len(errors)} bad line(s){more}; nothing imported — fix them and run again", err=True)
        sys.exit(2)
    items, dropped = to_items(records)
    if dry_run:
        click.echo(f"{len(items)} valid task(s), {dropped} duplicate line(s); nothing written (--dry-run)")
        return
    store = Store(cfg.database_url)
    try:
        with store.session() as s:  # one transaction: every task or none
            run_id = s.scalars(select(Run.id).where(Run.name == run_name)).first()
            if run_id is None and not create_run:
                raise click.UsageError(f"run {run_name!r} does not exist in store {mask_url(cfg.database_url)}: "
                                       "start it once with `propel run`, pass --run NAME, or --create-run")
            if run_id is None:
                run_id = repo.get_or_create_run(s, run_name, "import", {"created_by": "propel tasks import"})
            res = import_tasks(s, run_id, items)
    finally:
        store.dispose()
    click.echo(f"queued {res.queued} task(s) for run {run_name!r}; {res.already_queued} already queued there, "
               f"{dropped} duplicate line(s) in {file.name}")


STATES = click.Choice(["ready", "leased", "acked", "dead", "stale"])


@tasks_group.command("export")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="file to write (JSONL; Parquet when it ends in .parquet); default: standard output")
@click.option("--run", "run_name", default=None, help="run to export (default: run_name; with --api: the API's run)")
@click.option("--state", "states", type=STATES, multiple=True, help="only rows in this state (repeatable)")
@click.option("--topic", "topics", multiple=True, help="only this topic (repeatable)")
@click.option("--domain", "domains", multiple=True, help="only this domain (repeatable)")
@click.option("--since", type=click.DateTime(), default=None, help="enqueued at or after (UTC)")
@click.option("--until", type=click.DateTime(), default=None, help="enqueued before (UTC)")
@click.option("--limit", type=click.IntRange(1), default=None)
@click.option("--api", "api", is_flag=False, flag_value="", default=None,
              help="read from a running API (URL, or empty for api.host/api.port) instead of the store")
@click.pass_context
def export_command(ctx: click.Context, out: Path | None, run_name: str | None, states: tuple[str, ...],
                   topics: tuple[str, ...], domains: tuple[str, ...], since: datetime | None,
                   until: datetime | None, limit: int | None, api: str | None) -> None:
    """Write a run's queued tasks (message, text, state, outcome) as JSONL records or Parquet."""
    from curriculum.store.transfer import ExportFilter

    flt = ExportFilter(states=states, topics=topics, domains=domains, limit=limit,
                       since=since.replace(tzinfo=UTC) if since else None,
                       until=until.replace(tzinfo=UTC) if until else None)
    if out is not None and out.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise click.UsageError("Parquet export needs pyarrow (pip install pyarrow); or write .jsonl") from None
    if api is not None:
        with api_client(ctx, api or None) as client:
            n = _write(out, client.export(**_query(flt)))
        click.echo(f"exported {n} task(s) from {api_url(get_config(ctx), api or None)}", err=True)
        return
    n = _export_store(ctx, run_name, flt, out)
    click.echo(f"exported {n} task(s)", err=True)


def _query(flt: Any) -> dict[str, Any]:
    return {"state": list(flt.states), "topic": list(flt.topics), "domain": list(flt.domains), "limit": flt.limit,
            "since": flt.since.isoformat() if flt.since else None,
            "until": flt.until.isoformat() if flt.until else None}


def _export_store(ctx: click.Context, run_name: str | None, flt: Any, out: Path | None) -> int:
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import Run
    from curriculum.store.transfer import export_rows

    cfg = get_config(ctx)
    run_name = run_name or cfg.run_name
    store = Store(cfg.database_url)
    try:
        with store.session() as s:
            run_id = s.scalars(select(Run.id).where(Run.name == run_name)).first()
            if run_id is None:
                raise click.UsageError(f"run {run_name!r} does not exist in store {mask_url(cfg.database_url)}")
            return _write(out, export_rows(s, run_id, flt))
    finally:
        store.dispose()


def _write(out: Path | None, rows: Iterator[dict[str, Any]]) -> int:
    if out is not None and out.suffix == ".parquet":
        return _write_parquet(out, rows)
    if out is None:
        return _write_jsonl(sys.stdout, rows)
    with out.open("w", encoding="utf-8") as fh:
        return _write_jsonl(fh, rows)


def _write_jsonl(fh: IO[str], rows: Iterator[dict[str, Any]]) -> int:
    n = 0
    for row in rows:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        n += 1
    return n


def _write_parquet(out: Path, rows: Iterator[dict[str, Any]]) -> int:
    """One row per task: the selectable fields and the trainer's outcome (``outcome_solved``,
    ``outcome_n``, ``outcome_errors``, ``outcome_solver``; null until acked) as columns, the full
    record as a JSON string."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = ("id", "domain", "topic", "predicted_in_band", "solver", "state", "enqueued_at", "outcome_solved",
             "outcome_n", "outcome_errors", "outcome_solver", "record")
    cols: dict[str, list[Any]] = {k: [] for k in names}
    for row in rows:
        q = row.get("queue", {})
        outcome = q.get("outcome") or {}
        for k, v in (("id", row.get("id")), ("domain", row.get("domain")), ("topic", row.get("topic")),
                     ("predicted_in_band", row.get("predicted_in_band")), ("solver", row.get("solver")),
                     ("state", q.get("state")), ("enqueued_at", q.get("enqueued_at")),
                     ("outcome_solved", outcome.get("solved")), ("outcome_n", outcome.get("n")),
                     ("outcome_errors", outcome.get("errors")), ("outcome_solver", outcome.get("solver")),
                     ("record", json.dumps(row, ensure_ascii=False))):
            cols[k].append(v)
    types = {"outcome_solved": pa.int64(), "outcome_n": pa.int64(), "outcome_errors": pa.int64(),
             "outcome_solver": pa.string()}
    pq.write_table(pa.table({k: pa.array(v, type=types.get(k)) for k, v in cols.items()}), out)
    return len(cols["id"])
