"""`propel swe` passes its arguments to the SWE registry command line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from daemon.cli.main import cli


def test_swe_help_lists_the_subcommands() -> None:
    result = CliRunner().invoke(cli, ["swe", "--help"])
    assert result.exit_code == 0
    assert "propel swe" in result.output and "fetch" in result.output and "repos" in result.output


def test_swe_repos_without_a_preflight_says_what_to_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["swe", "--cache", str(tmp_path), "repos"])
    assert result.exit_code != 0
    assert "fetch" in result.output
