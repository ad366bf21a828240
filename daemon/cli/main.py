"""The ``propel`` command line.

User mistakes (bad config, bad file, unreachable database) end with a one-paragraph message and a
non-zero exit code, never a traceback: exit 2 for invalid input or configuration, 1 for runtime
failures. ``PROPEL_DEBUG=1`` re-raises for a full traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from daemon.cli.common import console, get_config
from daemon.config import ConfigError, load_config, mask_url


class PropelGroup(click.Group):
    """A click group that turns expected errors into clear messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)
        except Exception as err:
            from curriculum.store.db import StoreError

            if os.environ.get("PROPEL_DEBUG") or isinstance(err, click.ClickException | click.exceptions.Exit):
                raise
            if isinstance(err, StoreError) or type(err).__module__.startswith("sqlalchemy"):
                click.echo(f"store error: {_short(err)}", err=True)
                click.echo("  check store.url / PROPEL_DATABASE_URL and that the database is running", err=True)
                sys.exit(1)
            raise


def _short(err: Exception) -> str:
    text = str(err).split("\n", 1)[0]
    return mask_secrets(text)


def mask_secrets(text: str) -> str:
    """Mask ``user:password@`` in any URL inside ``text``."""
    import re

    return re.sub(r"(\w+://[^:/@\s]*):[^@\s]+@", r"\1:***@", text)


@click.group(cls=PropelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="PROPEL_CONFIG",
              help="TOML config file (default: built-in embedded demo settings). Env: PROPEL_CONFIG.")
@click.version_option(package_name="propel-curriculum")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """propel — an always-on supply of frontier RL tasks (PROPEL probe rewards, co-evolving probes).

    With no --config, everything runs embedded: a SQLite store under ./.propel, in-process workers,
    the arith demo domain and the synthetic benchmark solver.
    """
    ctx.ensure_object(dict)["config_path"] = config_path


@cli.group("config")
def config_group() -> None:
    """Validate and show configuration."""


@config_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def config_check(file: Path) -> None:
    """Validate FILE; print every error with its key and exit 2 if there is any."""
    cfg = load_config(file)
    console.print(f"[green]ok[/green]: {file} is valid (run_name={cfg.run_name}, domain={cfg.domain.name}, "
                  f"store={mask_url(cfg.database_url)})", highlight=False)


@config_group.command("show")
@click.pass_context
def config_show(ctx: click.Context) -> None:
    """Print the effective configuration (file + environment + defaults) as JSON, secrets masked."""
    cfg = get_config(ctx)
    data = cfg.model_dump(mode="json")
    data["store"]["url"] = mask_url(cfg.database_url)
    if data["broker"]["url"]:
        data["broker"]["url"] = mask_url(data["broker"]["url"])
    if data["api"]["token"]:
        data["api"]["token"] = "***"
    click.echo(json.dumps(data, indent=2))


def _register_commands() -> None:
    from daemon.cli.alerts import alerts
    from daemon.cli.bootstrap import bootstrap
    from daemon.cli.db import db_group, status_command
    from daemon.cli.run import check_command, run_command, serve_command
    from daemon.cli.tasks import tasks_group
    from daemon.cli.tasks_io import import_command  # noqa: F401  (adds import/export to the tasks group)
    from daemon.cli.worker import worker
    from probes.cli import probes

    cli.add_command(db_group)
    cli.add_command(status_command)
    cli.add_command(worker)
    cli.add_command(probes)
    cli.add_command(bootstrap)
    cli.add_command(alerts)
    cli.add_command(run_command)
    cli.add_command(check_command)
    cli.add_command(serve_command)
    cli.add_command(tasks_group)


_register_commands()


def main() -> None:
    cli(prog_name="propel")


if __name__ == "__main__":
    main()
