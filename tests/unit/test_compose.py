"""docker-compose.yml and Dockerfile: there is no Docker engine here, so check their structure and
that everything they reference exists (commands, env vars, mounted files, health checks)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from daemon.cli.main import cli
from daemon.config import ENV_OVERRIDES, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_topology(compose: dict) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "daemon", "worker", "retrainer", "vllm", "prometheus", "grafana"} <= set(services)
    assert services["vllm"]["profiles"] == ["gpu"]
    assert services["vllm"]["image"].startswith("vllm/vllm-openai")
    for name in ("daemon", "worker", "retrainer"):
        dep = services[name]["depends_on"]
        assert dep["postgres"]["condition"] == dep["redis"]["condition"] == "service_healthy"
        assert "propel-data:/var/lib/propel" in services[name]["volumes"], "probe artifacts are shared"
    assert set(compose["volumes"]) >= {"pg-data", "propel-data"}
    queues = {name: services[name]["command"][services[name]["command"].index("--queues") + 1]
              for name in ("worker", "retrainer")}
    assert queues == {"worker": "spotcheck", "retrainer": "retrain"}


def test_propel_commands_exist(compose: dict) -> None:
    for name in ("daemon", "worker", "retrainer"):
        args = compose["services"][name]["command"]
        res = CliRunner().invoke(cli, [*args, "--help"])
        assert res.exit_code == 0, f"{name}: propel {shlex.join(args)} is not a command: {res.output}"
    check = compose["services"]["daemon"]["healthcheck"]["test"]
    assert check[1:] == ["propel", "check"]


def test_environment_and_mounted_config(compose: dict) -> None:
    env = compose["services"]["daemon"]["environment"]
    assert set(ENV_OVERRIDES) <= set(env), "every URL/secret override is wired"
    mounts = compose["services"]["daemon"]["volumes"]
    host_cfg = next(m.split(":")[0] for m in mounts if m.endswith("production.toml:ro"))
    cfg = load_config(ROOT / host_cfg, env={"PROPEL_DATABASE_URL": "postgresql+psycopg://propel:x@postgres:5432/propel",
                                            "PROPEL_BROKER_URL": "redis://redis:6379/0", "PROPEL_API_TOKEN": "t"})
    assert cfg.solver.base_url == "http://vllm:8000/v1" and cfg.api.host == "0.0.0.0"
    assert str(cfg.api.port) in compose["services"]["daemon"]["ports"][0]


def test_mounted_deploy_files_exist(compose: dict) -> None:
    for svc in ("prometheus", "grafana"):
        for mount in compose["services"][svc]["volumes"]:
            src = mount.split(":")[0]
            assert (ROOT / src).exists(), f"{svc} mounts missing {src}"


def test_dockerfile_pins_torch_and_runs_propel() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "pip install torch==2.13.0" in text
    assert 'ENTRYPOINT ["propel"]' in text and "bubblewrap" in text
    for src in ("probes", "curriculum", "workers", "daemon", "migrations"):
        assert f"COPY {src} {src}" in text
