"""``propel alerts …``: test alert thresholds on the stored metric history of a run.

Exit codes: 0 success, 2 bad rules file or unknown run; store errors are reported by the ``propel``
group (exit 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from curriculum.store.db import Store
from daemon.cli.common import get_config
from daemon.config import PropelConfig
from daemon.ops.alerts.rules import RuleFileError, load_rules
from daemon.ops.replay import UnknownRunError, render_png, render_table, replay, replay_json


def _config(ctx: click.Context) -> PropelConfig:
    return get_config(ctx)


@click.group("alerts")
def alerts() -> None:
    """Collapse alerts: replay candidate rules on a run's stored metrics."""


@alerts.command("replay")
@click.option("--rules", "rules_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Alert rules file (.toml or .yaml: [[rules]] tables / a `rules:` list, or a propel config "
                   "with [[alerts.rules]]).")
@click.option("--run", "run_name", default=None, help="Run name (default: run_name of the config).")
@click.option("--png", "png_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a timeline PNG (metric lines, thresholds, firing intervals).")
@click.option("--json", "as_json", is_flag=True, help="Print the intervals as JSON instead of a table.")
@click.pass_context
def replay_command(ctx: click.Context, rules_path: Path, run_name: str | None, png_path: Path | None,
                   as_json: bool) -> None:
    """Show which alerts RULES would have fired on the stored history, next to those that did fire."""
    try:
        rules = load_rules(rules_path)
    except RuleFileError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    cfg = _config(ctx)
    store = Store(cfg.database_url)
    try:
        result = replay(store, run_name or cfg.run_name, rules)
    except UnknownRunError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps(replay_json(result), indent=2))
    else:
        Console(width=140).print(render_table(result))
    if png_path is not None:
        render_png(result, png_path)
        click.echo(f"timeline written to {png_path}", err=True)
