"""Generator rollback on validity or topic collapse (#34): the pure rules (tables)."""

from __future__ import annotations

import pytest

from daemon.loop import rollback
from daemon.loop.rollback import RollbackRule

RULE = RollbackRule(validity=0.3, cycles=3, healthy_validity=0.9)


@pytest.mark.parametrize(("validity", "healthy"), [(0.95, True), (0.9, True), (0.89, False), (0.1, False)])
def test_a_healthy_checkpoint_is_judged_on_its_sample_not_the_probes(validity: float, healthy: bool) -> None:
    # suspect probes or an open alert say nothing about the generator: in the long run they froze the target
    assert rollback.is_healthy(validity, RULE) is healthy


@pytest.mark.parametrize(("wanted", "rolled_back_to", "repeated"), [
    (490, 490, True),  # the long run went back to step 490 six times
    (490, None, False), (560, 490, False), (None, 490, False)])
def test_never_twice_to_the_same_step(wanted: int | None, rolled_back_to: int | None, repeated: bool) -> None:
    assert rollback.repeated(wanted, rolled_back_to) is repeated


def test_a_validity_collapse_after_validity_came_back_is_not_a_repeat() -> None:
    assert rollback.repeated(490, 490, revalidated=True) is False
    assert rollback.repeated(490, 490, revalidated=False) is True


@pytest.mark.parametrize(("before", "validity", "after"), [(0, 0.05, 1), (2, 0.29, 3), (2, 0.3, 0), (5, 0.9, 0)])
def test_low_streak(before: int, validity: float, after: int) -> None:
    assert rollback.low_streak(before, validity, RULE) == after


@pytest.mark.parametrize(("streak", "rule", "healthy", "current", "want"), [
    (3, RULE, 640, 910, 640),
    (2, RULE, 640, 910, None),  # not long enough
    (3, RULE, None, 910, None),  # no healthy step known
    (3, RULE, 910, 910, None),  # already there
    (9, RollbackRule(validity=0.0), 640, 910, None),  # off
])
def test_target(streak: int, rule: RollbackRule, healthy: int | None, current: int, want: int | None) -> None:
    assert rollback.target(streak, rule, healthy, current) == want


def test_the_log_line_reads() -> None:
    why = rollback.collapse(RULE, 0.05)
    assert rollback.describe(RULE, why, 910, 640, 640) == (
        "validity below 30% for 3 cycles in a row (last 5%): generator rolled back from step 910 to step 640, "
        "the last cycle with validity ≥ 90%")
    assert "cannot roll the generator back to step 640" in rollback.describe(RULE, why, 910, None, 640)
    assert rollback.describe_repeat("alert topic_collapse escalated", 490) == (
        "alert topic_collapse escalated: not rolling the generator back to step 490 again (rolled back there "
        "already, no healthy cycle since)")


TOPIC = RollbackRule(validity=0.3, cycles=3, healthy_validity=0.9, top_topic_share=0.45, healthy_top_topic_share=0.3)


@pytest.mark.parametrize(("validity", "share", "healthy"), [
    (0.95, 0.2, True), (0.95, 0.3, True), (0.95, 0.31, False),  # a collapsed topic mix is no rollback target
    (0.5, 0.2, False), (0.95, None, True)])  # no valid task: judged on validity
def test_a_healthy_checkpoint_also_has_a_mixed_topic_sample(validity: float, share: float | None,
                                                           healthy: bool) -> None:
    assert rollback.is_healthy(validity, TOPIC, share) is healthy
    assert rollback.is_healthy(validity, RULE, share) is (validity >= 0.9)  # off at the old rule's share 1


@pytest.mark.parametrize(("before", "share", "after"), [(0, 0.9, 1), (2, 0.46, 3), (2, 0.45, 0), (2, None, 2)])
def test_high_topic_streak(before: int, share: float | None, after: int) -> None:
    assert rollback.high_topic_streak(before, share, TOPIC) == after
    assert rollback.high_topic_streak(before, 1.0, RULE) == 0  # top_topic_share 1: never a collapse


def test_topic_rollback_alone_turns_the_rule_on() -> None:
    rule = RollbackRule(validity=0.0, top_topic_share=0.45)
    assert rule.on and not RollbackRule(validity=0.0).on
    assert rollback.target(3, rule, 640, 910) == 640


def test_the_topic_log_line_reads() -> None:
    why = rollback.topic_collapse(TOPIC, 0.96)
    assert rollback.describe(TOPIC, why, 910, 640, 640) == (
        "top-topic share above 45% for 3 cycles in a row (last 96%): generator rolled back from step 910 to step "
        "640, the last cycle with validity ≥ 90% and top-topic share ≤ 30%")


NOVEL = RollbackRule(validity=0.3, cycles=3, healthy_validity=0.9, novelty=0.1, healthy_novelty=0.3)


@pytest.mark.parametrize(("validity", "novel", "healthy"), [
    (0.95, 0.8, True), (0.95, 0.3, True), (0.95, 0.29, False),  # a repeating policy is no rollback target
    (0.5, 0.9, False), (0.95, None, True)])  # no valid task: judged on validity
def test_a_healthy_checkpoint_also_samples_new_tasks(validity: float, novel: float | None, healthy: bool) -> None:
    assert rollback.is_healthy(validity, NOVEL, None, novel) is healthy
    assert rollback.is_healthy(validity, RULE, None, novel) is (validity >= 0.9)  # healthy_novelty 0: not judged


@pytest.mark.parametrize(("before", "novel", "after"), [(0, 0.0, 1), (2, 0.09, 3), (2, 0.1, 0), (2, None, 2)])
def test_low_novelty_streak(before: int, novel: float | None, after: int) -> None:
    assert rollback.low_novelty_streak(before, novel, NOVEL) == after
    assert rollback.low_novelty_streak(before, 0.0, RULE) == 0  # novelty 0: never a collapse


def test_novelty_rollback_alone_turns_the_rule_on_and_reads() -> None:
    rule = RollbackRule(validity=0.0, novelty=0.1)
    assert rule.on and rollback.target(3, rule, 640, 910) == 640
    why = rollback.novelty_collapse(NOVEL, 0.02)
    assert rollback.describe(NOVEL, why, 910, 640, 640) == (
        "new tasks below 10% of the valid sample for 3 cycles in a row (last 2%: the generator repeats stored "
        "tasks): generator rolled back from step 910 to step 640, the last cycle with validity ≥ 90% and new "
        "tasks ≥ 30%")
