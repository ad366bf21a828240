"""Alert rule models and rule files: TOML, YAML, propel config sections, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from daemon.ops.alerts.rules import (
    DEFAULT_RULES,
    AlertRule,
    AlertRules,
    Comparator,
    MitigationKind,
    RuleFileError,
    Severity,
    load_rules,
    rules_from_mapping,
)

TOML_RULES = """
[[rules]]
name = "collapse"
metric = "top_topic_share"
comparator = ">"
threshold = 0.6
for_cycles = 2
severity = "critical"
mitigation = "pause_topic"

[[rules]]
name = "kl"
metric = "distinct3"
comparator = "<="
threshold = 0.3
mitigation = { kind = "raise_kl", factor = 3.0 }
"""

YAML_RULES = """
rules:
  - name: collapse
    metric: top_topic_share
    comparator: ">"
    threshold: 0.6
    for_cycles: 2
    severity: critical
    mitigation: pause_topic
  - name: kl
    metric: distinct3
    comparator: "<="
    threshold: 0.3
    mitigation: {kind: raise_kl, factor: 3.0}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_and_yaml_files_give_the_same_rules(tmp_path: Path) -> None:
    from_toml = load_rules(_write(tmp_path, "rules.toml", TOML_RULES))
    from_yaml = load_rules(_write(tmp_path, "rules.yaml", YAML_RULES))
    assert from_toml == from_yaml
    collapse, kl = from_toml
    assert collapse.comparator is Comparator.GT and collapse.severity is Severity.CRITICAL
    assert collapse.mitigation is not None and collapse.mitigation.kind is MitigationKind.PAUSE_TOPIC
    assert kl.for_cycles == 1 and kl.severity is Severity.WARNING
    assert kl.mitigation is not None and kl.mitigation.factor == 3.0


def test_a_propel_config_file_with_alerts_rules_works(tmp_path: Path) -> None:
    text = TOML_RULES.replace("[[rules]]", "[[alerts.rules]]")
    config = _write(tmp_path, "propel.toml", 'run_name = "x"\n[alerts]\nsample_size = 128\n' + text)
    assert [r.name for r in load_rules(config)] == ["collapse", "kl"]


@pytest.mark.parametrize(("rules", "key", "message"), [
    ([{"name": "a", "metric": "top_topic_share", "comparator": ">", "threshold": "high"}],
     "rules[0].threshold", "valid number"),
    ([{"name": "a", "metric": "topic_share", "comparator": ">", "threshold": 0.5}],
     "rules[0].metric", "unknown metric 'topic_share'"),
    ([{"name": "a", "metric": "validity", "comparator": "=>", "threshold": 0.5}],
     "rules[0].comparator", "'>'"),
    ([{"name": "a", "metric": "validity", "comparator": "<", "threshold": 0.5, "for": 3}],
     "rules[0].for", "unknown key"),
    ([{"name": "a", "metric": "validity", "comparator": "<", "threshold": 0.5, "for_cycles": 0}],
     "rules[0].for_cycles", "greater than or equal to 1"),
    ([{"name": "a", "metric": "validity", "comparator": "<", "threshold": 0.5, "mitigation": "reboot"}],
     "rules[0].mitigation.kind", "retrain_aux_topic"),
    ([{"name": "a", "metric": "validity", "comparator": "<", "threshold": 0.5,
       "mitigation": {"kind": "pause_topic", "factor": 2}}], "rules[0].mitigation", "factor only applies to raise_kl"),
    ([{"name": "a", "metric": "validity", "comparator": "<", "threshold": 0.5}] * 2, "rules", "repeated: a"),
    ([{"metric": "validity", "comparator": "<", "threshold": 0.5}], "rules[0].name", "required value is missing"),
])
def test_errors_name_the_key(rules: list[dict[str, object]], key: str, message: str) -> None:
    with pytest.raises(RuleFileError) as info:
        rules_from_mapping({"rules": rules}, "test.toml")
    keys = [k for k, _ in info.value.problems]
    assert key in keys, info.value.problems
    assert message in dict(info.value.problems)[key]
    assert str(info.value).startswith("test.toml: ")


def test_file_level_errors(tmp_path: Path) -> None:
    cases = [
        (_write(tmp_path, "bad.toml", "[[rules]\nname = 1"), "(syntax)"),
        (_write(tmp_path, "bad.yaml", "rules: [unclosed"), "(syntax)"),
        (_write(tmp_path, "rules.json", "{}"), "(file)"),
        (tmp_path / "missing.toml", "(file)"),
        (_write(tmp_path, "empty.toml", 'title = "no rules"'), "rules"),
    ]
    for path, key in cases:
        with pytest.raises(RuleFileError) as info:
            load_rules(path)
        assert info.value.problems[0][0] == key, (path, info.value.problems)


def test_defaults_are_valid_and_cover_the_paper_failure_modes() -> None:
    assert AlertRules().rules == DEFAULT_RULES
    by_metric = {(r.metric, r.comparator) for r in DEFAULT_RULES}
    assert {("top_topic_share", Comparator.GT), ("distinct3", Comparator.LT), ("validity", Comparator.LT),
            ("probe_precision", Comparator.LT)} <= by_metric
    dumped = AlertRules.model_validate({"rules": [r.model_dump(mode="json") for r in DEFAULT_RULES]})
    assert dumped.rules == DEFAULT_RULES


def test_rules_embed_in_a_frozen_config_section() -> None:
    class AlertsSection(BaseModel):  # how AlertsConfig embeds them
        model_config = ConfigDict(frozen=True, extra="forbid")
        sample_size: int = 256
        rules: tuple[AlertRule, ...] = DEFAULT_RULES

    section = AlertsSection.model_validate({"rules": [{"name": "v", "metric": "validity", "comparator": "<",
                                                       "threshold": 0.4, "mitigation": "raise_kl"}]})
    assert section.rules[0].mitigation is not None and section.rules[0].mitigation.factor == 2.0
    assert AlertsSection().rules == DEFAULT_RULES
    assert DEFAULT_RULES[0].expression == "top_topic_share > 0.5 for 3 cycle(s)"
