"""``propel swe fetch|repos|grade``: the SWE repository registry (see docs/SWE.md)."""

from __future__ import annotations

import sys

import click


@click.command("swe", context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def swe(args: tuple[str, ...]) -> None:
    """SWE repositories: `fetch` downloads and preflights the registry, `repos` shows each one's status,
    split and exclusion reason, `grade` grades a candidate fix. `propel swe --help` for the options."""
    from curriculum.domains.swe.cli import main

    sys.exit(main(list(args), prog="propel swe"))
