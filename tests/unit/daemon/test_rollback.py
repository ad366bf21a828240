"""Generator rollback on validity collapse (#34): the pure rules (tables)."""

from __future__ import annotations

import pytest

from daemon.loop import rollback
from daemon.loop.rollback import RollbackRule

RULE = RollbackRule(validity=0.3, cycles=3, healthy_validity=0.9)


@pytest.mark.parametrize(("validity", "suspect", "healthy"), [
    (0.95, False, True), (0.9, False, True), (0.89, False, False), (0.99, True, False)])
def test_a_healthy_cycle_needs_validity_and_trusted_probes(validity: float, suspect: bool, healthy: bool) -> None:
    assert rollback.is_healthy(validity, suspect, RULE) is healthy


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
    assert rollback.describe(RULE, 0.05, 910, 640, 640) == (
        "validity below 30% for 3 cycles in a row (last 5%): generator rolled back from step 910 to step 640, "
        "the last cycle with validity ≥ 90%, trusted probes and no open mitigation")
    assert "cannot roll the generator back to step 640" in rollback.describe(RULE, 0.05, 910, None, 640)
