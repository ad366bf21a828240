"""Hacking signals without labels (#34): JS divergence of topics, the verdict and its hold (tables)."""

from __future__ import annotations

import pytest

from daemon.loop import hacking
from daemon.loop.hacking import Signals, SuspectLimits
from daemon.loop.health import PROBES_SUSPECT

BASE = {"add:1": 25, "add:2": 25, "mul:2": 25, "sub:3": 25}


@pytest.mark.parametrize(("sample", "js"), [
    (BASE, 0.0),
    ({"add:1": 50, "add:2": 50, "mul:2": 50, "sub:3": 50}, 0.0),  # counts, not totals
    ({"x:9": 10}, 1.0),  # disjoint
    ({"add:1": 100}, 0.549),  # collapse onto one of four topics
    ({"add:1": 40, "add:2": 30, "mul:2": 20, "sub:3": 10}, 0.040),  # worked by hand
    ({}, 0.0),  # nothing to compare
])
def test_js_divergence(sample: dict[str, int], js: float) -> None:
    assert hacking.js_divergence(sample, hacking.shares(BASE)) == pytest.approx(js, abs=1e-3)


LIMITS = SuspectLimits(max_topic_js=0.5, max_top_topic_share=0.8, max_gap=0.3, min_labels=10, hold_cycles=5)


@pytest.mark.parametrize(("signals", "said"), [
    (Signals(topic_js=0.2, top_topic_share=0.4, predicted=0.55, verified=0.45, verified_labels=30), []),
    (Signals(topic_js=0.55), ["topics drifted from the baseline (JS divergence 0.55 > 0.5)"]),
    (Signals(top_topic_share=0.99), ["one topic holds 99% of valid tasks (> 80%)"]),
    (Signals(predicted=0.58, verified=0.07, verified_labels=30), ["predicted utility 58% exceeds verified 7% by 0.51"]),
    (Signals(predicted=0.58, verified=0.07, verified_labels=9), []),  # too few labels for the gap
    (Signals(predicted=0.58), []),  # unverified: no gap
    (Signals(topic_js=0.9, top_topic_share=0.95), ["JS divergence 0.90", "one topic holds 95%"]),
])
def test_reasons(signals: Signals, said: list[str]) -> None:
    got = hacking.reasons(signals, LIMITS)
    assert len(got) == len(said) and all(s in g for s, g in zip(said, got, strict=True)), got
    assert hacking.reasons(signals, SuspectLimits.off()) == []  # the driver's default: no signal can pass


@pytest.mark.parametrize(("cycle", "tripped", "until", "new_until", "suspect"), [
    (10, False, -1, -1, False),
    (10, True, -1, 15, True),
    (13, False, 15, 15, True),  # held after the signal cleared …
    (16, False, 15, 15, False),  # … then it ends
    (14, True, 15, 19, True),  # a new trip extends the hold
])
def test_the_verdict_is_held_for_hold_cycles(cycle: int, tripped: bool, until: int, new_until: int,
                                             suspect: bool) -> None:
    why = ["one topic holds 99% of valid tasks (> 80%)"] if tripped else []
    assert hacking.suspect_until(cycle, why, until, LIMITS) == new_until
    d = hacking.probes_suspect(cycle, new_until, why, "earlier signal", hacking.acting(LIMITS))
    assert (d is not None) == suspect
    if d is not None:
        assert d.reason == PROBES_SUSPECT and "emitted only at probe probability raised by 0.1" in d.detail
        assert ("99%" in d.detail) if tripped else ("earlier signal (held until cycle 15)" in d.detail)


@pytest.mark.parametrize(("response", "suspect", "threshold", "words"), [
    ("tighten", True, 0.6, "tasks are emitted only at probe probability raised by 0.1"),  # the default
    ("tighten", False, 0.5, "tasks are emitted only at probe probability raised by 0.1"),
    ("verified_only", True, 0.5, "only spot-check-verified tasks are emitted"),  # opt-in: starved the long run
])
def test_the_response_keeps_emission_going_by_default(response: str, suspect: bool, threshold: float,
                                                     words: str) -> None:
    limits = SuspectLimits(response=response)  # type: ignore[arg-type]
    assert SuspectLimits().response == "tighten"
    assert hacking.min_probability(0.5, suspect, limits) == pytest.approx(threshold)
    assert hacking.acting(limits).startswith(words)


@pytest.mark.parametrize(("base", "cycles_in", "probes", "want", "cycles_out"), [
    ({}, 0, "e1", {"mul:2": 10.0}, 1),  # the first cycle starts it …
    ({"add:1": 10.0}, 1, "e1", {"add:1": 10.0, "mul:2": 10.0}, 2),  # … later ones add to it (not one cycle alone)
    ({"add:1": 10.0}, 3, "e1", {"add:1": 10.0}, 3),  # full: fixed
    ({"add:1": 10.0}, 3, "e2", {"mul:2": 10.0}, 1),  # new probes (promotion, aux probe): a new baseline
])
def test_the_topic_baseline_spans_cycles_and_follows_the_probes(base: dict[str, float], cycles_in: int, probes: str,
                                                                want: dict[str, float], cycles_out: int) -> None:
    got = hacking.baseline(base, cycles_in, {"mul:2": 10}, probes, "e1", SuspectLimits(baseline_cycles=3))
    assert got == (want, cycles_out)
