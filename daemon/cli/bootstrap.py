"""``propel bootstrap <domain>``: build the tiny offline generator for a domain."""

from __future__ import annotations

import os
from pathlib import Path

import click

from curriculum.domains.base import available_domains


def _default_data_dir() -> Path:
    return Path(os.environ.get("PROPEL_DATA_DIR", "data"))


@click.command("bootstrap")
@click.argument("domain")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where models are cached (default: $PROPEL_DATA_DIR or ./data).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Training steps (default: recipe).")
@click.option("--force", is_flag=True, help="Retrain even if a cached model with these settings exists.")
def bootstrap(domain: str, data_dir: Path | None, steps: int | None, force: bool) -> None:
    """Pretrain (or reuse) the tiny generator for DOMAIN and report its measured validity."""
    from curriculum.bootstrap import BOOTSTRAP_DOMAINS
    from curriculum.bootstrap import bootstrap as run_bootstrap

    if domain not in BOOTSTRAP_DOMAINS:
        known = ", ".join(available_domains())
        raise click.UsageError(
            f"no bootstrap for domain {domain!r}; bootstrappable: {', '.join(BOOTSTRAP_DOMAINS)} "
            f"(known domains: {known})"
        )
    result = run_bootstrap(domain, data_dir or _default_data_dir(), steps=steps, force=force)
    state = "reused cached model" if result.reused else f"trained in {result.train_s:.0f}s"
    click.echo(f"{domain}: {state}, {result.n_params:,} parameters")
    click.echo(f"model: {result.path}")
    click.echo(f"validity: {result.validity:.1%} of sampled completions are valid {domain} tasks")
