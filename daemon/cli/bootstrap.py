"""``propel bootstrap <domain>``: build the tiny offline generator for a domain."""

from __future__ import annotations

from pathlib import Path

import click

from curriculum.domains.base import available_domains
from daemon.cli.common import get_config


@click.command("bootstrap")
@click.argument("domain")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where models are cached (default: the config's data_dir, i.e. $PROPEL_DATA_DIR or ./.propel, "
                   "the same cache `propel run` uses).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps (default: generator.bootstrap_steps of the config, else the recipe).")
@click.option("--force", is_flag=True, help="Retrain even if a cached model with these settings exists.")
@click.pass_context
def bootstrap(ctx: click.Context, domain: str, data_dir: Path | None, steps: int | None, force: bool) -> None:
    """Pretrain (or reuse) the tiny generator for DOMAIN and report its measured validity.

    It caches where `propel run` looks, so a bootstrap done ahead of time is reused by the daemon.
    """
    from curriculum.rl.bootstrap import BOOTSTRAP_DOMAINS
    from curriculum.rl.bootstrap import bootstrap as run_bootstrap

    if domain not in BOOTSTRAP_DOMAINS:
        known = ", ".join(available_domains())
        raise click.UsageError(
            f"no bootstrap for domain {domain!r}; bootstrappable: {', '.join(BOOTSTRAP_DOMAINS)} "
            f"(known domains: {known})"
        )
    cfg = get_config(ctx)
    options = dict(cfg.domain.options) if domain == cfg.domain.name else None  # swe: which repository cache
    try:
        result = run_bootstrap(domain, data_dir or Path(cfg.data_dir), steps=steps or cfg.generator.bootstrap_steps,
                               force=force, domain_options=options)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    state = "reused cached model" if result.reused else f"trained in {result.train_s:.0f}s"
    if result.steps_trained < result.settings.steps:
        state += f" ({result.steps_trained:,} of {result.settings.steps:,} steps: the validity check passed early)"
    click.echo(f"{domain}: {state}, {result.n_params:,} parameters")
    click.echo(f"model: {result.path}")
    click.echo(f"validity: {result.validity:.1%} of sampled completions are valid {domain} tasks")
