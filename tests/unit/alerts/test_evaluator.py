"""The pure evaluator on tables of metric histories: `for` windows, resolves, gaps, mitigations."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from daemon.ops.alerts.evaluation import AlertEvent, OpenAlert, evaluate
from daemon.ops.alerts.rules import DEFAULT_RULES, AlertRule, Comparator, MitigationKind, MitigationSpec

HIGH = AlertRule(name="high", metric="top_topic_share", comparator=Comparator.GT, threshold=0.5, for_cycles=3)
LOW = AlertRule(name="low", metric="distinct3", comparator=Comparator.LE, threshold=0.4, for_cycles=1,
                mitigation=MitigationSpec(kind=MitigationKind.RAISE_KL))


def _history(metric: str, values: Sequence[float | None], start: int = 0) -> dict[int, dict[str, float]]:
    return {start + i: ({} if v is None else {metric: v}) for i, v in enumerate(values)}


def _summary(events: list[AlertEvent]) -> list[tuple[str, str, int]]:
    return [(e.kind, e.rule, e.cycle) for e in events]


@pytest.mark.parametrize(("values", "expected"), [
    # never three in a row above 0.5
    ([0.6, 0.6, 0.4, 0.6, 0.6, 0.4], []),
    # fires on the third consecutive observation, resolves on the first one back under
    ([0.6, 0.6, 0.6, 0.7, 0.4], [("fire", "high", 2), ("resolve", "high", 4)]),
    # the threshold itself does not satisfy ">"
    ([0.5, 0.5, 0.5, 0.5], []),
    # re-firing needs a fresh streak after the resolve
    ([0.6, 0.6, 0.6, 0.3, 0.6, 0.6, 0.6], [("fire", "high", 2), ("resolve", "high", 3), ("fire", "high", 6)]),
    # a cycle without the metric neither breaks nor extends the streak, and never fires/resolves
    ([0.6, None, 0.6, None, 0.6, None, 0.2], [("fire", "high", 4), ("resolve", "high", 6)]),
    # still open at the end of the history
    ([0.9, 0.9, 0.9, 0.9], [("fire", "high", 2)]),
])
def test_for_window_and_resolve(values: list[float | None], expected: list[tuple[str, str, int]]) -> None:
    assert _summary(evaluate([HIGH], _history("top_topic_share", values), {})) == expected


@pytest.mark.parametrize(("comparator", "values", "fires_at"), [
    (">", [0.4, 0.5, 0.6], [2]),
    (">=", [0.4, 0.5, 0.6], [1]),
    ("<", [0.6, 0.5, 0.4], [2]),
    ("<=", [0.6, 0.5, 0.4], [1]),
])
def test_comparators(comparator: str, values: list[float], fires_at: list[int]) -> None:
    rule = AlertRule(name="r", metric="validity", comparator=Comparator(comparator), threshold=0.5)
    fired = [e.cycle for e in evaluate([rule], _history("validity", values), {}) if e.kind == "fire"]
    assert fired == fires_at


def test_open_state_is_respected_and_not_modified() -> None:
    state = {"high": OpenAlert("high", cycle_fired=1, alert_id=42)}
    events = evaluate([HIGH], _history("top_topic_share", [0.9, 0.9, 0.2]), state, cycles=[2])
    assert _summary(events) == [("resolve", "high", 2)]
    assert events[0].alert_id == 42 and events[0].value == pytest.approx(0.2)
    assert state == {"high": OpenAlert("high", 1, 42)}
    # open and still holding: nothing to do
    assert evaluate([HIGH], _history("top_topic_share", [0.9, 0.9, 0.9]), state, cycles=[2]) == []


def test_evaluating_one_cycle_at_a_time_equals_the_whole_history() -> None:
    values = [0.6, 0.6, 0.6, 0.3, None, 0.7, 0.7, 0.8, 0.1, 0.9]
    history = {c: {**v, "distinct3": 0.3 + 0.05 * c} for c, v in _history("top_topic_share", values).items()}
    rules = [HIGH, LOW]
    whole = evaluate(rules, history, {})
    stepped: list[AlertEvent] = []
    state: dict[str, OpenAlert] = {}
    for cycle in sorted(history):
        events = evaluate(rules, {c: v for c, v in history.items() if c <= cycle}, state, cycles=[cycle])
        for e in events:
            if e.kind == "fire":
                state[e.rule] = OpenAlert(e.rule, e.cycle)
            else:
                state.pop(e.rule)
        stepped += events
    assert _summary(stepped) == _summary(whole)
    assert ("fire", "low", 0) in _summary(whole) and ("resolve", "low", 3) in _summary(whole)


def test_future_cycles_are_ignored_when_evaluating_a_past_cycle() -> None:
    history = _history("top_topic_share", [0.6, 0.6, 0.6, 0.6])
    assert _summary(evaluate([HIGH], history, {}, cycles=[1])) == []


def test_mitigation_is_returned_with_the_alert_and_the_dominant_topic() -> None:
    collapse = next(r for r in DEFAULT_RULES if r.name == "topic_collapse")
    history = _history("top_topic_share", [0.8, 0.8, 0.8])
    [event] = evaluate([collapse], history, {}, topics={2: "+:1"})
    assert event.kind == "fire" and event.mitigation is not None
    assert event.mitigation.kind is MitigationKind.RETRAIN_AUX_TOPIC
    assert (event.mitigation.rule, event.mitigation.cycle, event.mitigation.topic) == ("topic_collapse", 2, "+:1")
    [kl] = [e for e in evaluate([LOW], _history("distinct3", [0.1]), {})]
    assert kl.mitigation is not None and kl.mitigation.factor == 2.0


def test_alert_of_a_removed_rule_resolves() -> None:
    state = {"gone": OpenAlert("gone", 0, 7)}
    [event] = evaluate([HIGH], _history("top_topic_share", [0.1]), state)
    assert (event.kind, event.rule, event.alert_id, event.value, event.spec) == ("resolve", "gone", 7, None, None)


def test_default_rules_catch_the_paper_failure_modes() -> None:
    collapsing = {c: {"top_topic_share": 0.2 + 0.1 * c, "distinct3": 0.7 - 0.08 * c, "validity": 0.95 - 0.1 * c,
                      "probe_precision": 0.6 - 0.06 * c, "self_bleu3": 0.55 + 0.05 * c,
                      "drift_score": 0.1 * c, "emission_stalled": float(c >= 8),
                      "probes_suspect": float(c >= 5), "emission_pause_expired": float(c >= 9),
                      "trainer_too_easy": 0.1 * c, "novel_share": max(0.0, 0.9 - 0.15 * c)} for c in range(10)}
    fired = {e.rule for e in evaluate(DEFAULT_RULES, collapsing, {}) if e.kind == "fire"}
    assert fired == {r.name for r in DEFAULT_RULES}
    healthy = {c: {"top_topic_share": 0.1, "distinct3": 0.7, "validity": 0.97, "probe_precision": 0.6,
                   "self_bleu3": 0.57, "drift_score": 0.1, "emission_stalled": 0.0,
                   "probes_suspect": 0.0, "emission_pause_expired": 0.0, "trainer_too_easy": 0.3, "novel_share": 0.8}
               for c in range(8)}
    assert evaluate(DEFAULT_RULES, healthy, {}) == []


def test_frontier_behind_trainer_needs_three_observed_cycles_over_half() -> None:
    """Cycles without new acks record no ``trainer_too_easy``: they neither break nor extend the streak."""
    rule = next(r for r in DEFAULT_RULES if r.name == "frontier_behind_trainer")
    history = {0: {"trainer_too_easy": 0.8}, 1: {}, 2: {"trainer_too_easy": 0.7}, 3: {"trainer_too_easy": 0.4},
               4: {"trainer_too_easy": 0.6}, 5: {"trainer_too_easy": 0.9}, 6: {}, 7: {"trainer_too_easy": 0.55},
               8: {"trainer_too_easy": 0.2}}
    events = [(e.kind, e.cycle) for e in evaluate([rule], history, {})]
    assert events == [("fire", 7), ("resolve", 8)]
