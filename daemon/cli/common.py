"""What every ``propel`` subcommand shares: the validated config of the root group."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from daemon.config import PropelConfig, load_config

console = Console()


def get_config(ctx: click.Context) -> PropelConfig:
    """The config of the ``propel`` root group (``--config`` / ``PROPEL_CONFIG``), or the defaults."""
    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        path = obj.get("config_path")
        obj["config"] = load_config(Path(path) if path else None)
    config: PropelConfig = obj["config"]
    return config
