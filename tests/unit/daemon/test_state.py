"""The typed, versioned driver state: version-1 rows (the untyped counters dict) load; a newer or
corrupt row is refused with a message naming the fix; a round trip through the stored JSON is exact."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from daemon.loop.state import STATE_VERSION, Champion, DriverState, PendingCheck, StateError, load_state

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def test_a_version_1_row_loads() -> None:
    old = {"kl_factor": 2.0, "dominant_topic": "+:1", "spotcheck_pending": [4, 9], "spotcheck_undispatched": [9],
           "fp_since_retrain": 5, "retrain_job": "r-aux-c3", "retrain_undispatched": True, "emitted_total": 41,
           "paused_topics": ["+:1"], "paused_by": {"topic_collapse": ["+:1"]}, "force_retrain": True}
    state = load_state(old, NOW)
    assert state.version == STATE_VERSION and state.kl_factor == 2.0 and state.dominant_topic == "+:1"
    assert state.spotcheck_pending == {4: PendingCheck(dispatched_at=NOW), 9: PendingCheck(dispatched_at=NOW)}
    assert state.spotcheck_undispatched == [9] and state.retrain_job == "r-aux-c3" and state.retrain_undispatched
    assert state.totals.emitted == 41 and state.paused_by == {"topic_collapse": ["+:1"]} and state.force_retrain
    assert load_state({}, NOW) == DriverState()  # a fresh row


def test_a_version_1_row_of_the_solver_version_daemon_loads() -> None:
    """The untyped counters of a daemon that already followed solver versions keep their meaning."""
    old = {"spotcheck_pending": [4, 9], "spotcheck_pending_sid": {"4": "policy@step-2"}, "solver_version": "step-2",
           "refresh_job": "r-primary-r3", "refresh_undispatched": True, "refresh_drift_seen": [1, 2],
           "refresh_labels_at": 64,
           "champion": {"probe": "r-primary-r1", "cycle": 1, "at": "2026-11-22T09:00:00+00:00"}}
    state = load_state(old, NOW)
    assert state.spotcheck_pending == {4: PendingCheck(dispatched_at=NOW, solver_id="policy@step-2"),
                                       9: PendingCheck(dispatched_at=NOW)}
    assert (state.solver_version, state.refresh_job, state.refresh_undispatched) == ("step-2", "r-primary-r3", True)
    assert state.refresh_drift_seen == [1, 2] and state.refresh_labels_at == 64
    assert state.champion == Champion(probe="r-primary-r1", cycle=1, at=datetime(2026, 11, 22, 9, tzinfo=UTC))


def test_a_version_2_row_without_solver_fields_loads() -> None:
    """A row written before the solver-version fields existed reads with their defaults."""
    stored = {"version": 2, "spotcheck_pending": {"3": {"dispatched_at": "2026-11-23T10:00:00Z"}}}
    state = load_state(stored, NOW)
    assert state.spotcheck_pending[3].solver_id is None and state.champion is None and state.refresh_job is None
    assert state.totals.primary_refreshes == state.totals.stale_retired == state.totals.drift_remeasured == 0


def test_the_stored_json_round_trips() -> None:
    state = DriverState(spotcheck_pending={3: PendingCheck(dispatched_at=NOW, redispatches=1)}, retrain_job="j")
    state.totals.emitted = 7
    stored = state.stored()
    assert stored["version"] == STATE_VERSION and stored["spotcheck_pending"] == {
        "3": {"dispatched_at": "2026-11-23T10:00:00Z", "redispatches": 1, "solver_id": None}}
    assert load_state(stored, NOW) == state


@pytest.mark.parametrize(("stored", "message"), [
    ({"version": 3}, "version 3; this daemon reads 1 and 2"),
    ({"version": 2, "kl_factor": -1}, "unreadable driver state"),
    ({"version": 2, "surprise": 1}, "unreadable driver state"),
])
def test_a_state_this_daemon_cannot_read_is_refused(stored: dict[str, object], message: str) -> None:
    with pytest.raises(StateError, match=message):
        load_state(stored, NOW)


def test_assignments_are_validated() -> None:
    state = DriverState()
    with pytest.raises(ValueError, match="kl_factor"):
        state.kl_factor = 0.0
