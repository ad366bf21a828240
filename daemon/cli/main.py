"""The ``propel`` command line.

User mistakes (bad config, bad file, unreachable database) end with a one-paragraph message and a
non-zero exit code, never a traceback: exit 2 for invalid input or configuration, 1 for runtime
failures. ``PROPEL_DEBUG=1`` re-raises for a full traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import click

from daemon.cli.common import console, get_config
from daemon.config import ConfigError, load_config, mask_secrets, mask_url

EXIT_INVALID = 2  # invalid input or configuration
EXIT_UNREACHABLE = 1  # a runtime failure: nothing answers at the API, store or broker address


class PropelGroup(click.Group):
    """A click group that turns expected errors into one clear line and an exit code.

    Exit 2: invalid input or configuration. Exit 1: a runtime failure, including "nothing answers"
    (the API at its URL, the store at its DSN, the broker at its URL): the line names the address
    and what to do. Any command family gets this for free, so a new command need not catch them.
    """

    #: subcommands whose modules import torch, loaded when named (``propel tasks …`` starts without torch)
    lazy: ClassVar[dict[str, tuple[str, str]]] = {"probes": ("probes.cli", "probes")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr = self.lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(EXIT_INVALID)
        except Exception as err:
            if os.environ.get("PROPEL_DEBUG") or isinstance(err, click.ClickException | click.exceptions.Exit):
                raise
            line = unreachable_message(err, ctx.ensure_object(dict).get("config"))
            if line is None:
                raise
            click.echo(line, err=True)
            sys.exit(EXIT_UNREACHABLE)


def unreachable_message(err: BaseException, cfg: Any = None) -> str | None:
    """One line for an API, store or broker that does not answer; None for any other error."""
    import httpx

    from curriculum.store.db import StoreError

    if isinstance(err, httpx.TransportError):
        try:
            url = str(err.request.url.copy_with(path="/", query=None)).rstrip("/")
        except RuntimeError:
            url = "the API URL"
        return (f"error: nothing answers at {mask_secrets(url)} ({_short(err) or type(err).__name__}): start the "
                "daemon (`propel run`) or the API alone (`propel serve`), or point --url / api.host and api.port "
                "at the running one")
    if isinstance(err, StoreError) or type(err).__module__.startswith("sqlalchemy"):
        dsn = mask_url(cfg.database_url) if cfg is not None else "store.url"
        return (f"error: store {dsn} unreachable ({_short(err)}): check store.url / PROPEL_DATABASE_URL and that "
                "the database is running (`propel db upgrade` creates the schema)")
    if type(err).__module__.startswith(("kombu", "amqp", "redis")):
        broker = mask_url(cfg.broker.url) if cfg is not None and cfg.broker.url else "broker.url"
        return (f"error: broker {broker} unreachable ({_short(err)}): check broker.url / PROPEL_BROKER_URL and that "
                "Redis or RabbitMQ is running")
    return None


def _short(err: BaseException) -> str:
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return mask_secrets(text)[:300]


@click.group(cls=PropelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="PROPEL_CONFIG",
              help="TOML config file (default: built-in embedded demo settings). Env: PROPEL_CONFIG.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", envvar="PROPEL_LOG_FORMAT",
              show_default=True, help="json: one JSON object per line on stderr, for log shippers (no progress "
              "bars). Env: PROPEL_LOG_FORMAT.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              envvar="PROPEL_LOG_LEVEL", show_default=True, help="Env: PROPEL_LOG_LEVEL.")
@click.version_option(package_name="propel-curriculum")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, log_format: str, log_level: str) -> None:
    """propel — an always-on supply of frontier RL tasks (PROPEL probe rewards, co-evolving probes).

    With no --config, everything runs embedded: a SQLite store under ./.propel, in-process workers,
    the arith demo domain and the synthetic benchmark solver.
    """
    from daemon.ops.logs import configure_logging

    configure_logging("json" if log_format == "json" else "text", log_level.upper())
    obj = ctx.ensure_object(dict)
    obj["config_path"] = config_path
    obj["log_format"] = log_format
    if ctx.invoked_subcommand == "probes":  # the sweep's defaults: probes.ece_ceiling, .validation, .balance
        cfg = get_config(ctx)
        sweep: dict[str, object] = {"ece_ceiling": cfg.probes.ece_ceiling}
        if "validation" in cfg.probes.model_fields_set:  # set by the file or the domain's defaults
            sweep["split"] = cfg.probes.validation
        if "balance" in cfg.probes.model_fields_set:
            sweep["balances"] = cfg.probes.train_balance
        ctx.default_map = {"probes": {"sweep": sweep}}


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
    from daemon.cli.solver import solver_group
    from daemon.cli.swe import swe
    from daemon.cli.tasks import tasks_group
    from daemon.cli.tasks_io import import_command  # noqa: F401  (adds import/export to the tasks group)
    from daemon.cli.tasks_stats import stats_command  # noqa: F401  (adds stats to the tasks group)
    from daemon.cli.worker import worker

    cli.add_command(db_group)
    cli.add_command(status_command)
    cli.add_command(worker)
    cli.add_command(bootstrap)
    cli.add_command(alerts)
    cli.add_command(run_command)
    cli.add_command(check_command)
    cli.add_command(serve_command)
    cli.add_command(tasks_group)
    cli.add_command(solver_group)
    cli.add_command(swe)


_register_commands()


def main() -> None:
    cli(prog_name="propel")


if __name__ == "__main__":
    main()
