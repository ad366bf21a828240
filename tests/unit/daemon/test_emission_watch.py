"""Emission never stops silently (#34): the stall rules as pure functions (tables)."""

from __future__ import annotations

import pytest

from daemon.loop import emission_watch as ew
from daemon.loop.health import EMISSION_STALLED
from daemon.loop.phases import Candidate


@pytest.mark.parametrize(("before", "emitted", "full", "after"), [
    (0, 0, False, 1),
    (9, 0, False, 10),
    (9, 3, False, 0),  # one emitted task ends the stall
    (9, 0, True, 0),  # a full queue (backpressure) is not a stall
])
def test_idle_cycles(before: int, emitted: int, full: bool, after: int) -> None:
    assert ew.idle_cycles(before, emitted, full) == after


CANDS = [Candidate(1, 0.494, "add"), Candidate(2, 0.30, "mul"), Candidate(3, 0.9, "sub"),  # sub is paused
         Candidate(4, 0.2, "add", in_band=False), Candidate(5, 0.1, "mul", in_band=True)]


def test_stall_facts_count_what_the_emit_phase_saw() -> None:
    f = ew.stall_facts(CANDS, min_probability=0.5, paused_topics=frozenset({"sub"}), verified_only=False)
    assert (f.candidates, f.best_unverified, f.verified_in_band, f.verified_out_of_band, f.paused) == (
        5, 0.494, 1, 1, 1)
    assert ew.stall_facts([], min_probability=0.5, paused_topics=frozenset(), verified_only=True).best_unverified \
        is None


@pytest.mark.parametrize(("idle", "limit", "cands", "verified_only", "says"), [
    (9, 10, CANDS, False, None),  # not yet
    (10, 0, CANDS, False, None),  # the check is off
    (10, 10, CANDS, False, "the best unverified candidate scored 0.494 against the emission bar 0.5 "
                           "(gate: probe predictions"),
    (12, 10, CANDS, True, "no task emitted for 12 cycles"),
    (10, 10, CANDS, True, "gate: spot-check-verified tasks only"),
    (10, 10, [], False, "no valid task was sampled in the emit window"),
    (10, 10, [Candidate(1, 0.9, "sub")], False, "no unverified candidate of an unpaused topic was left"),
])
def test_emission_stalled_says_why(idle: int, limit: int, cands: list[Candidate], verified_only: bool,
                                   says: str | None) -> None:
    facts = ew.stall_facts(cands, min_probability=0.5, paused_topics=frozenset({"sub"}), verified_only=verified_only)
    d = ew.emission_stalled(idle, limit, facts)
    if says is None:
        assert d is None
        return
    assert d is not None and d.reason == EMISSION_STALLED
    assert says in d.detail and "spot-checks go to the top-scored candidates" in d.detail


def test_a_trainers_stall_is_answered_below_the_bar() -> None:
    """A followed trainer has no spot-checks: the detail says the top-scored are served below the bar, and
    counts cycles in which no task passed the gate (below-bar tasks are emitted meanwhile)."""
    facts = ew.stall_facts(CANDS, min_probability=0.5, paused_topics=frozenset(), verified_only=False)
    d = ew.emission_stalled(11, 10, facts, trainer=True)
    assert d is not None and d.detail.startswith("no task passed the gate for 11 cycles")
    assert '"below_bar": true' in d.detail and "spot-checks" not in d.detail
