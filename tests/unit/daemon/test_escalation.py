"""Mitigations that escalate (#34): the rule (tables) and its readable lines (#38 item 5)."""

from __future__ import annotations

import pytest

from daemon.loop import escalation
from daemon.loop.escalation import Applied
from daemon.ops.alerts.evaluation import AlertEvent, Mitigation, mitigation_words
from daemon.ops.alerts.rules import DEFAULT_RULES, MitigationKind

COLLAPSE = Applied(rule="topic_collapse", kind="retrain_aux_topic", topic="sub:4", metric="top_topic_share",
                   comparator=">", threshold=0.5, value=0.61, cycle=70)


@pytest.mark.parametrize(("level", "cycle", "value", "after", "decision"), [
    (0, 75, 0.7, 10, "wait"),  # still bad, not yet due
    (0, 80, 0.7, 10, "escalate"),  # still bad after 10 cycles
    (0, 80, 0.45, 10, "worked"),  # back below the threshold
    (0, 80, 0.5, 10, "worked"),  # the rule is "> 0.5": 0.5 no longer holds
    (0, 90, None, 10, "wait"),  # not measured this cycle
    (0, 200, 0.9, 0, "wait"),  # escalation off
    (2, 200, 0.9, 10, "wait"),  # pause_emission is the last level
    (2, 200, 0.3, 10, "worked"),
])
def test_decide(level: int, cycle: int, value: float | None, after: int, decision: str) -> None:
    assert escalation.decide(COLLAPSE.model_copy(update={"level": level}), cycle, value, after) == decision


@pytest.mark.parametrize(("level", "skip_rollback", "to"), [
    (0, False, "rollback"), (0, True, "pause_emission"), (1, False, "pause_emission")])
def test_escalated(level: int, skip_rollback: bool, to: str) -> None:
    nxt = escalation.escalated(COLLAPSE.model_copy(update={"level": level}), 80, 0.8, skip_rollback)
    assert escalation.LEVELS[nxt.level] == to and (nxt.cycle, nxt.value) == (80, 0.8)


def test_lines_are_readable_words_not_dicts() -> None:
    nxt = escalation.escalated(COLLAPSE, 80, 0.8, skip_rollback=False)
    assert escalation.describe(COLLAPSE, "escalate", 80, 0.8, nxt) == (
        "alert topic_collapse: retrain an aux probe with topic sub:4's tasks as negatives (applied at cycle 70 with "
        "top_topic_share 0.61) did not bring top_topic_share back (> 0.5) within 10 cycles (now 0.8): escalating to "
        "a generator rollback")
    assert escalation.describe(nxt, "worked", 85, 0.4) == (
        "alert topic_collapse: a generator rollback (applied at cycle 80 with top_topic_share 0.8) worked: "
        "top_topic_share is 0.4 at cycle 85, no longer > 0.5")
    paused = escalation.escalated(nxt, 90, 0.8, skip_rollback=False)
    assert escalation.describe(nxt, "escalate", 90, 0.8, paused).endswith("escalating to pausing emission")


@pytest.mark.parametrize(("kind", "topic", "factor", "words"), [
    ("pause_topic", "mul:3", None, "pause emitting topic mul:3"),
    ("retrain_aux_topic", None, None, "retrain an aux probe on the mined false positives"),
    ("raise_kl", None, 4.0, "raise the KL coefficient ×4 for the next RL chunk"),
])
def test_mitigation_words(kind: str, topic: str | None, factor: float | None, words: str) -> None:
    assert mitigation_words(kind, topic, factor) == words
    assert Mitigation(MitigationKind(kind), "r", 1, factor, topic).describe() == words


def test_record_keeps_one_per_rule_with_the_metric_and_value_at_firing() -> None:
    rule = next(r for r in DEFAULT_RULES if r.name == "topic_flooding")
    fire = AlertEvent("fire", rule.name, 12, 0.41, rule, None, Mitigation(MitigationKind.PAUSE_TOPIC, rule.name, 12,
                                                                         None, "add:5"))
    no_mitigation = AlertEvent("fire", "self_bleu3_high", 12, 0.9, None)
    got = escalation.record([COLLAPSE, COLLAPSE.model_copy(update={"rule": "topic_flooding"})], [fire, no_mitigation])
    assert [a.rule for a in got] == ["topic_collapse", "topic_flooding"]
    assert (got[1].kind, got[1].topic, got[1].metric, got[1].comparator, got[1].value, got[1].cycle, got[1].level) \
        == ("pause_topic", "add:5", "top_topic_share", ">", 0.41, 12, 0)


PAUSED = COLLAPSE.model_copy(update={"level": 2, "cycle": 100})


@pytest.mark.parametrize(("resolved", "left"), [
    (["topic_collapse"], []),  # the alert resolved (or its rule left the config): the pause it set is lifted
    (["validity_low"], ["topic_collapse"]),
    ([], ["topic_collapse"]),
])
def test_a_resolved_rule_drops_its_record(resolved: list[str], left: list[str]) -> None:
    assert [a.rule for a in escalation.drop_resolved([PAUSED], resolved)] == left


@pytest.mark.parametrize(("record", "cycle", "max_paused", "ended"), [
    (PAUSED, 129, 30, False),
    (PAUSED, 130, 30, True),  # paused 30 cycles: it ends instead of waiting for ever
    (PAUSED, 500, 0, False),  # 0: never
    (COLLAPSE.model_copy(update={"cycle": 100}), 130, 30, False),  # not a pause
])
def test_an_emission_pause_ends_after_max_paused_cycles(record: Applied, cycle: int, max_paused: int,
                                                        ended: bool) -> None:
    kept, gone = escalation.expired([record], cycle, max_paused)
    assert (gone, kept) == (([record], []) if ended else ([], [record]))
    if ended:
        assert escalation.describe_expired(record, cycle) == (
            "alert topic_collapse: emission paused since cycle 100 and top_topic_share still not back (> 0.5) at "
            "cycle 130: the pause ends (health.max_paused_cycles)")


PRECISION = Applied(rule="probe_precision_low", kind="retrain_aux_topic", topic="mul:1", metric="probe_precision",
                    comparator="<", threshold=0.3, value=0.0, cycle=22, level=1)


@pytest.mark.parametrize(("record", "trainer", "blind"), [
    (PRECISION, True, True),  # a trainer's acks measure it: a pause would stop them
    (PRECISION, False, False),  # spot-checks go on while emission is paused
    (COLLAPSE.model_copy(update={"level": 1}), True, False),  # the generator's sample measures it
    (PRECISION.model_copy(update={"level": 0}), True, False),  # the next level is a rollback, not a pause
])
def test_a_pause_that_would_blind_a_trainers_metric_is_not_taken(record: Applied, trainer: bool,
                                                                  blind: bool) -> None:
    nxt = escalation.escalated(record, 52, 0.0, skip_rollback=False)
    assert escalation.blind_pause(nxt, trainer) is blind


def test_a_pause_not_taken_says_why() -> None:
    assert escalation.describe_blind_pause(PRECISION, 52, 0.0) == (
        "alert probe_precision_low: a generator rollback (applied at cycle 22 with probe_precision 0) did not bring "
        "probe_precision back (< 0.3) within 30 cycles (now 0); emission is not paused: the followed trainer's acks "
        "measure probe_precision, and a pause would stop them")
