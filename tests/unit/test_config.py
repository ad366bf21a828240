"""Configuration: defaults, environment overrides, and errors that name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from daemon.cli.main import cli
from daemon.config import ConfigError, load_config, mask_url

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_need_no_file() -> None:
    cfg = load_config(None, env={})
    assert cfg.database_url.startswith("sqlite:///") and cfg.database_url.endswith("propel.db")
    assert cfg.broker.embedded and cfg.solver.backend == "synthetic" and cfg.domain.name == "arith"
    assert cfg.reference_model == cfg.generator.model


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '[store]\nurl = "sqlite:///a.db"\n')
    env = {"PROPEL_DATABASE_URL": "postgresql+psycopg://u:pw@h:5432/db",
           "PROPEL_BROKER_URL": "redis://h:6379/0", "PROPEL_API_TOKEN": "s3cret"}
    cfg = load_config(path, env=env)
    assert cfg.store.url == env["PROPEL_DATABASE_URL"]
    assert cfg.broker.url == "redis://h:6379/0" and cfg.api.token == "s3cret"
    assert "s3cret" not in repr(cfg.api)


def test_frozen() -> None:
    cfg = load_config(None, env={})
    with pytest.raises(Exception, match="frozen"):
        cfg.spotcheck.k = 3  # type: ignore[misc]


@pytest.mark.parametrize(("text", "key", "words"), [
    ('[store]\nbogus = 1\n', "store.bogus", "unknown key"),
    ('[spotcheck]\nk = "eight"\n', "spotcheck.k", "integer"),
    ('[solver]\nbackend = "openai"\n', "solver", "solver.base_url is required"),
    ('[store]\nurl = "mysql://root:pw@h/db"\n', "store.url", "unsupported database URL"),
    ('[broker]\nurl = "http://x"\n', "broker.url", "unsupported broker URL"),
    ('[solver]\nbackend = "openai"\nbase_url = "ftp://x"\nmodel = "m"\n', "solver", "http://"),
    ('[spotcheck]\nk = 3\nband_hi = 5\n', "spotcheck", "cannot exceed spotcheck.k"),
    ('[rl]\nbatch_size = 10\n', "rl", "multiple of rl.num_generations"),
    ('[domain]\nname = "azr"\n', "(top level)", "only works with domain.name = 'arith'"),
    ('[broker]\nvisibility_timeout_s = 100\ntask_time_limit_s = 200\n', "broker", "below"),
    ('run_name = "has space"\n', "run_name", "pattern"),
    ('[store\n', "(syntax)", "invalid TOML"),
    ('[solver]\nbackend = "hf"\nmodel = "/ckpt/{version}"\n', "solver", "set solver.version"),
    ('[solver]\nbackend = "openai"\nbase_url = "http://x"\nmodel = "/c/{version}"\nversion = "step-0"\n', "solver",
     "needs solver.backend = 'hf'"),
    ('[domain]\nname = "swe"\n[solver]\nbackend = "swe-agent"\nmodel = "m"\n', "solver",
     "solver.base_url is required when solver.backend = 'swe-agent'"),
    ('[domain]\nname = "swe"\n[solver]\nbackend = "swe-agent"\nbase_url = "http://x"\n', "solver",
     "solver.model is required when solver.backend = 'swe-agent'"),
    ('[solver]\nbackend = "swe-agent"\nbase_url = "http://x"\nmodel = "m"\n', "(top level)",
     "'swe-agent' only works with domain.name = 'swe'"),
    ('[domain]\nname = "swe"\n[solver.agent]\nmax_steps = 0\n', "solver.agent.max_steps", "greater than or equal"),
    ('[domain]\nname = "swe"\n[generator.agent]\nper_cycle = 2\nmodel = "m"\n', "generator.agent",
     "generator.agent.base_url is required"),
    ('[generator.agent]\nper_cycle = 1\nbase_url = "http://x"\nmodel = "m"\n', "(top level)",
     "generator.agent (agent-written bugs) only works with domain.name = 'swe'"),
    ('[frontier]\ntrainer_band_lead = 4\n', "(top level)", "must not exceed spotcheck.band_hi (3)"),
    ('[frontier]\ntrainer_band_lead = "ahead"\n', "frontier.trainer_band_lead", 'or "auto", got'),
    ('[frontier]\ntrainer_band_lead = -1\n', "frontier.trainer_band_lead", "number of solves"),
])
def test_errors_name_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), env={})
    keys = [k for k, _ in info.value.problems]
    assert key in keys, info.value.problems
    assert words in str(info.value)


def test_password_masked_in_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, '[store]\nurl = "mysql://root:hunter2@h/db"\n'), env={})
    assert "hunter2" not in str(info.value)
    assert mask_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(Path("/nonexistent/propel.toml"), env={})


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_examples_are_valid(example: Path) -> None:
    load_config(example, env={})


def test_config_check_cli_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = _write(tmp_path, '[store]\nbogus = 1\n[spotcheck]\nk = "x"\n')
    res = runner.invoke(cli, ["config", "check", str(bad)])
    assert res.exit_code == 2
    assert "store.bogus" in res.output and "spotcheck.k" in res.output
    good = tmp_path / "good.toml"
    good.write_text('run_name = "ok"\n')
    res = runner.invoke(cli, ["config", "check", str(good)])
    assert res.exit_code == 0 and "valid" in res.output


def test_config_check_subprocess_has_no_traceback(tmp_path: Path) -> None:
    bad = _write(tmp_path, '[api]\nport = "x"\n')
    proc = subprocess.run([sys.executable, "-m", "daemon.cli.main", "config", "check", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "api.port" in proc.stderr and "Traceback" not in proc.stderr


def test_config_show_masks_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPEL_DATABASE_URL", "postgresql+psycopg://u:topsecret@h/db")
    monkeypatch.setenv("PROPEL_API_TOKEN", "tok123")
    res = CliRunner().invoke(cli, ["config", "show"])
    assert res.exit_code == 0, res.output
    assert "topsecret" not in res.output and "tok123" not in res.output
    assert "u:***@h/db" in res.output


def test_artifacts_url_default_follows_the_mode_and_a_bad_protocol_names_the_key(tmp_path: Path) -> None:
    from daemon.config import config_from_mapping

    embedded = config_from_mapping({"data_dir": str(tmp_path)}, env={})
    assert embedded.artifacts_url == str((tmp_path / "artifacts").absolute())
    distributed = config_from_mapping({"broker": {"url": "redis://h:6379/0"}}, env={})
    assert distributed.artifacts_url == "db"
    assert config_from_mapping({}, env={"PROPEL_ARTIFACTS_URL": "s3://lab/propel"}).artifacts_url == "s3://lab/propel"
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"artifacts": {"url": "nosuch://x"}}, env={})
    assert [key for key, _ in info.value.problems] == ["artifacts.url"]
    assert "not an fsspec protocol" in str(info.value)


def test_swe_domain_fills_its_cpu_defaults_and_keeps_what_the_file_sets() -> None:
    from daemon.config import config_from_mapping, with_domain

    cfg = config_from_mapping({"domain": {"name": "swe", "options": {"cache_dir": "/c"}},
                               "spotcheck": {"budget_per_cycle": 3}}, env={})
    assert (cfg.generator.model, cfg.solver.backend) == ("bootstrap:swe", "synthetic-swe")
    sc = cfg.spotcheck
    assert (sc.k, sc.band_lo, sc.band_hi, sc.min_valid_trials) == (3, 1, 2, 2)
    assert cfg.frontier.trainer_band_lead == 0  # no lead measured on SWE (docs/FRONTIER.md, 'Aiming ahead')
    assert config_from_mapping({}, env={}).frontier.trainer_band_lead == "auto"  # the default elsewhere
    assert config_from_mapping({"frontier": {"trainer_band_lead": 1}}, env={}).frontier.trainer_band_lead == 1
    assert cfg.spotcheck.budget_per_cycle == 3 and cfg.domain.options == {"cache_dir": "/c", "prompt_style": "tiny"}
    default = config_from_mapping({"data_dir": "/d"}, env={})
    moved = with_domain(default, "swe")  # `propel run --domain swe` on a config that names no domain
    assert moved.domain.name == "swe" and moved.solver.backend == "synthetic-swe" and str(moved.data_dir) == "/d"
    with pytest.raises(ConfigError, match=r"'synthetic-swe' only works with domain\.name = 'swe'"):
        config_from_mapping({"solver": {"backend": "synthetic-swe"}}, env={})


def test_run_domain_swe_without_fetched_repositories_is_one_line(tmp_path: Path) -> None:
    env = {"PROPEL_DATA_DIR": str(tmp_path / "data"), "PROPEL_SWE_CACHE": str(tmp_path / "swe-cache")}
    result = CliRunner().invoke(cli, ["run", "--domain", "swe", "--cycles", "1", "--no-api"], env=env)
    assert result.exit_code == 2, result.output
    assert "no fetched, preflighted SWE repository among parse, inflection, sqlparse (split 'rl-train'): " \
           "run `propel swe fetch`" in result.output
    assert not (tmp_path / "data" / "propel.db").exists()  # refused before the run was opened
