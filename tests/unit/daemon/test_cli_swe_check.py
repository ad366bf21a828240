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


def test_check_sandbox_lists_what_the_backend_lacks(tmp_path: Path) -> None:
    """`propel check --sandbox` prints the containment lines even when the daemon is not running."""
    config = tmp_path / "p.toml"
    config.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "x.db"}"\n[domain]\nname = "azr"\n'
                      '[domain.options]\nsandbox = "rlimit"\n'
                      '[solver]\nbackend = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "check", "--sandbox", "--no-api"])
    assert "sandbox rlimit: lacks" in result.output
    assert result.exit_code == 1  # no daemon: unhealthy, after the sandbox report
