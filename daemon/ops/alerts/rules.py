"""Alert rules: the rule model, the default rules, and rule files (TOML/YAML)."""

from __future__ import annotations

import logging
import operator
import tomllib
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemon.ops.metrics import METRIC_TABLE_NAMES

log = logging.getLogger("propel.alerts")

History = Mapping[int, Mapping[str, float]]
"""cycle → {metric-table name: value}."""


class Comparator(StrEnum):
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="


COMPARATORS: dict[Comparator, Callable[[float, float], bool]] = {
    Comparator.GT: operator.gt, Comparator.GE: operator.ge, Comparator.LT: operator.lt, Comparator.LE: operator.le,
}


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class MitigationKind(StrEnum):
    RETRAIN_AUX_TOPIC = "retrain_aux_topic"  # aux-probe retrain, dominant topic family as negatives
    RAISE_KL = "raise_kl"  # multiply the KL coefficient of the next RL chunk by ``factor``
    PAUSE_TOPIC = "pause_topic"  # stop emitting the dominant topic until the alert resolves


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MitigationSpec(_Frozen):
    """What the daemon should do when the rule fires; TOML: ``mitigation = "pause_topic"`` or a table."""

    kind: MitigationKind
    factor: float | None = Field(default=None, gt=1, le=100, description="raise_kl only: KL multiplier")

    @model_validator(mode="before")
    @classmethod
    def _default_factor(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("kind") == MitigationKind.RAISE_KL and data.get("factor") is None:
            return {**data, "factor": 2.0}
        return data

    @model_validator(mode="after")
    def _factor_only_for_kl(self) -> MitigationSpec:
        if self.kind is not MitigationKind.RAISE_KL and self.factor is not None:
            raise ValueError(f"factor only applies to raise_kl, not {self.kind.value}; remove it")
        return self


class AlertRule(_Frozen):
    """``metric comparator threshold`` held for ``for_cycles`` consecutive observations → alert."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    metric: str
    comparator: Comparator
    threshold: float
    for_cycles: int = Field(default=1, ge=1, le=10_000)
    severity: Severity = Severity.WARNING
    mitigation: MitigationSpec | None = None
    description: str = ""

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in METRIC_TABLE_NAMES:
            raise ValueError(f"unknown metric {value!r}; use one of: {', '.join(METRIC_TABLE_NAMES)}")
        return value

    @field_validator("mitigation", mode="before")
    @classmethod
    def _short_mitigation(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    def holds(self, value: float) -> bool:
        return COMPARATORS[self.comparator](value, self.threshold)

    @property
    def expression(self) -> str:
        return f"{self.metric} {self.comparator.value} {self.threshold:g} for {self.for_cycles} cycle(s)"


class AlertRules(_Frozen):
    """A rule set (what a rules file holds; embed ``rules`` in ``AlertsConfig``)."""

    rules: tuple[AlertRule, ...] = Field(default_factory=lambda: DEFAULT_RULES)

    @field_validator("rules")
    @classmethod
    def _unique(cls, rules: tuple[AlertRule, ...]) -> tuple[AlertRule, ...]:
        names = [r.name for r in rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(dupes)}")
        return rules


DEFAULT_RULES: tuple[AlertRule, ...] = (
    AlertRule(name="topic_collapse", metric="top_topic_share", comparator=Comparator.GT, threshold=0.5,
              for_cycles=3, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RETRAIN_AUX_TOPIC),
              description="one topic dominates the valid tasks (PROPEL §6: 73% on one topic)"),
    AlertRule(name="topic_flooding", metric="top_topic_share", comparator=Comparator.GT, threshold=0.35,
              for_cycles=2, severity=Severity.WARNING,
              mitigation=MitigationSpec(kind=MitigationKind.PAUSE_TOPIC),
              description="the top topic's share is rising; pause emitting it"),
    AlertRule(name="distinct3_low", metric="distinct3", comparator=Comparator.LT, threshold=0.4,
              for_cycles=3, severity=Severity.WARNING,
              mitigation=MitigationSpec(kind=MitigationKind.RAISE_KL, factor=2.0),
              description="Distinct-3 of the fixed sample is falling (template collapse)"),
    AlertRule(name="self_bleu3_high", metric="self_bleu3", comparator=Comparator.GT, threshold=0.8,
              for_cycles=3, severity=Severity.WARNING,
              description="Self-BLEU-3 of the fixed sample is high (near-duplicate tasks)"),
    AlertRule(name="validity_low", metric="validity", comparator=Comparator.LT, threshold=0.5,
              for_cycles=2, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RAISE_KL, factor=4.0),
              description="most generator outputs are invalid (check the invalid floor lies below probe logits)"),
    AlertRule(name="novelty_low", metric="novel_share", comparator=Comparator.LT, threshold=0.1,
              for_cycles=3, severity=Severity.WARNING,
              description="the generator's valid samples are mostly tasks the store already holds: supply dries up "
                          "while validity and the topic mix look fine (health.rollback_novelty rolls it back)"),
    AlertRule(name="probe_precision_low", metric="probe_precision", comparator=Comparator.LT, threshold=0.3,
              for_cycles=2, severity=Severity.CRITICAL,
              mitigation=MitigationSpec(kind=MitigationKind.RETRAIN_AUX_TOPIC),
              description="probe-high tasks are mostly out of band: the probe is being reward-hacked"),
    AlertRule(name="emission_stalled", metric="emission_stalled", comparator=Comparator.GE, threshold=1,
              for_cycles=1, severity=Severity.CRITICAL,
              description="no task emitted for emission.stall_cycles cycles; the message says why (best score, "
                          "threshold, gate, candidates) and the daemon spends spot-checks on the top-scored ones"),
    AlertRule(name="probes_suspect", metric="probes_suspect", comparator=Comparator.GE, threshold=1,
              for_cycles=1, severity=Severity.CRITICAL,
              description="hacking signals (topic drift, top-topic share, predicted-minus-verified gap) say the "
                          "probes are not trustworthy; the message names them and the response "
                          "(health.suspect_response)"),
    AlertRule(name="emission_pause_expired", metric="emission_pause_expired", comparator=Comparator.GE, threshold=1,
              for_cycles=1, severity=Severity.CRITICAL,
              description="an escalation paused emission for health.max_paused_cycles cycles and its metric is "
                          "still not back: the pause ended; the generator needs a look"),
    AlertRule(name="frontier_drift", metric="drift_score", comparator=Comparator.GT, threshold=0.3,
              for_cycles=1, severity=Severity.WARNING,
              description="a new solver version moved the frontier: over 30% of formerly in-band tasks left the "
                          "band (the primary probe is refreshed above frontier.refresh_drift_threshold)"),
    AlertRule(name="frontier_behind_trainer", metric="trainer_too_easy", comparator=Comparator.GT, threshold=0.5,
              for_cycles=3, severity=Severity.WARNING,
              description="the followed trainer solves most served tasks above the band: its solver outran the "
                          "generator's candidates (docs/FRONTIER.md, 'Alert frontier_behind_trainer')"),
)


# ----------------------------------------------------------------------------------------- rule files
class RuleFileError(Exception):
    """A rules file that cannot be used; ``problems`` holds ``(key, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source, self.problems = source, problems
        super().__init__("\n".join([f"{source}: {len(problems)} alert-rule error(s)",
                                    *(f"  {k}: {m}" for k, m in problems)]))


def rules_from_mapping(data: Any, source: str = "<rules>") -> tuple[AlertRule, ...]:
    """Validate ``{"rules": [...]}`` (or a propel config with ``[[alerts.rules]]``)."""
    if isinstance(data, Mapping) and "rules" not in data and isinstance(data.get("alerts"), Mapping):
        data, prefix = data["alerts"], "alerts."
    else:
        prefix = ""
    if not isinstance(data, Mapping) or "rules" not in data:
        raise RuleFileError(source, [("rules", "missing: write the rules as [[rules]] tables (TOML) "
                                               "or a `rules:` list (YAML)")])
    try:
        return AlertRules.model_validate({"rules": data["rules"]}).rules
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = [str(p) for p in e["loc"]]
            key = loc[0] + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:]) if loc else "rules"
            msg = e["msg"].removeprefix("Value error, ")
            if e["type"] == "extra_forbidden":
                msg = "unknown key: remove it or check its spelling"
            elif e["type"] == "missing":
                msg = "required value is missing"
            problems.append((prefix + key, msg))
        raise RuleFileError(source, problems) from None


def load_rules(path: Path) -> tuple[AlertRule, ...]:
    """Rules from a ``.toml``, ``.yaml`` or ``.yml`` file; raises :class:`RuleFileError`."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RuleFileError(source, [("(file)", f"cannot read: {err}")]) from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise RuleFileError(source, [("(file)", "use a .toml, .yaml or .yml file")])
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
        raise RuleFileError(source, [("(syntax)", f"invalid {suffix[1:].upper()}: {err}")]) from None
    return rules_from_mapping(data, source)
