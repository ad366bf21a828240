"""deploy/: the Prometheus rules mirror DEFAULT_RULES (promtool-tested), Grafana files are well formed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.ops.alerts.rules import DEFAULT_RULES
from daemon.ops.metrics import GAUGES, build_metrics
from tests.conftest import require_service

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
PROM = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
CYCLE_MINUTES = 5  # alerts.yml documents `for:` = for_cycles × 5m


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created")}


def _exposed_names() -> set[str]:
    """Every series name the daemon's registry can expose (from its collectors, without feeding them)."""
    names = set()
    for family in build_metrics().registry.collect():
        names |= {family.name} | {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def _rules() -> list[dict[str, Any]]:
    return [r for g in _yaml(PROM / "alerts.yml")["groups"] for r in g["rules"]]


def test_prometheus_rules_mirror_the_default_rules() -> None:
    by_rule = {r["labels"].get("rule"): r for r in _rules()}
    for rule in DEFAULT_RULES:
        prom = by_rule[rule.name]
        assert prom["expr"] == f"{GAUGES[rule.metric][0]} {rule.comparator.value} {rule.threshold:g}"
        assert prom["labels"]["severity"] == rule.severity.value
        assert prom["for"] == f"{CYCLE_MINUTES * rule.for_cycles}m"
        assert prom["annotations"]["summary"] and prom["annotations"]["description"]
    assert {r["labels"]["severity"] for r in _rules()} <= {"info", "warning", "critical"}


def test_deploy_files_only_use_exported_metric_names() -> None:
    exposed = _exposed_names()
    texts = [(PROM / "alerts.yml").read_text(), (GRAFANA / "dashboards" / "propel.json").read_text()]
    used = {name for text in texts for name in re.findall(r"\b(?:propel|process)_[a-z0-9_]+", text)}
    assert used and used <= exposed, used - exposed


def test_the_scrape_has_the_process_resident_memory() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.ops.metrics import render

    families = {f.name: f for f in text_string_to_metric_families(render(build_metrics())[0].decode())}
    [rss] = families["process_resident_memory_bytes"].samples  # what the Grafana "Resident memory" panel plots
    assert rss.value > 2**20 and families["process_open_fds"].samples[0].value > 0


def test_prometheus_config_scrapes_the_daemon() -> None:
    config = _yaml(PROM / "prometheus.yml")
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] == ["daemon:8787"]
    assert all((PROM / f).is_file() for f in config["rule_files"])


def test_promtool_checks_and_rule_unit_tests() -> None:
    promtool = shutil.which("promtool")
    require_service("promtool", promtool is not None, "apt-get install -y prometheus (Debian ships promtool in it)")
    assert promtool is not None
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"],
                 ["test", "rules", "alerts_test.yml"]):
        proc = subprocess.run([promtool, *args], cwd=PROM, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    tested = {t["alertname"] for case in _yaml(PROM / "alerts_test.yml")["tests"]
              for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert tested == {r["alert"] for r in _rules()}  # every alert has a firing test


def test_grafana_dashboard_and_provisioning() -> None:
    [source] = _yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [provider] = _yaml(GRAFANA / "provisioning" / "dashboards" / "propel.yml")["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    dash = json.loads((GRAFANA / "dashboards" / "propel.json").read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, f"panel {p['title']} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == source["uid"]
        assert p["targets"] and all(t["refId"] and t["expr"] for t in p["targets"])
    titles = " ".join(p["title"] for p in panels)
    for needed in ("Top-topic share", "Distinct-3", "Self-BLEU-3", "Validity", "Queue depth", "Open alerts"):
        assert needed in titles


@pytest.mark.parametrize("path", sorted(p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*.y*ml")))
def test_every_yaml_file_parses(path: str) -> None:
    assert _yaml(DEPLOY / path)
