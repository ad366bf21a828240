"""Is the generator hacking the probes? Cheap per-cycle signals without new solver calls, and a verdict (#34).

On the embedded default the generator learnt to please the frozen probes: emitted tasks were *less*
often in band than unfiltered samples, one topic took 99 % of valid tasks, validity crashed. The
signals, each computed from what the cycle already has:

* **topic drift** — Jensen–Shannon divergence (base 2, so in [0, 1]) between the topic histogram of
  the cycle's valid samples and the *baseline* histogram: the summed topic counts of the first
  ``baseline_cycles`` sampled cycles under the current probes (one cycle alone made ordinary learning
  trip the check: the long run was suspect 179 of 199 cycles). A change of the probes (a promoted
  primary, an aux probe registered) starts a new baseline (:func:`baseline`). Topics are what the domain
  already computes for every task, a histogram is a few dozen counts, and a probe trained on one topic
  mix is least trustworthy where the policy moved away from it — so this is the cheapest proxy for
  "the samples left the probes' training distribution" (no features, no extra forward pass).
* **top-topic share** — the flooding the alerts already watch, as a hard limit here.
* **predicted − verified gap** — when the window has enough labels (:mod:`daemon.loop.utility`): the
  mean probe probability of the labelled probe-high tasks minus their in-band share — like with like
  (the mean score of the whole sample is the RL reward, which rises by design).

Ensemble disagreement is not used: the default ensemble has one member and the scorer returns the
combined score only.

When a signal trips, the probes are *suspect* for ``health.suspect_hold_cycles`` cycles (so a
borderline signal does not flap): the driver raises the ``probes_suspect`` degraded reason and spends
the spot-check allowance on the top-scored waiting candidates (the tasks a hacked probe rates highest
are where its false positives are). ``health.suspect_response`` says what emission does meanwhile:
``tighten`` (default) keeps emitting with the probability threshold raised by ``health.suspect_raise``;
``verified_only`` emits spot-check-verified tasks only — in the long run that starved supply (179 of
199 cycles suspect, ~0.3 tasks/cycle instead of ~90). A validity collapse rolls the generator back
(:mod:`daemon.loop.rollback`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from daemon.loop.health import PROBES_SUSPECT, Degradation
from daemon.loop.utility import UtilityView


@dataclass(frozen=True)
class SuspectLimits:
    max_topic_js: float = 0.5  # JS divergence (bits) of the cycle's topics from the baseline
    max_top_topic_share: float = 0.8
    max_gap: float = 0.3  # predicted minus verified utility
    min_labels: int = 10  # labels the verified utility needs before the gap counts
    hold_cycles: int = 5
    baseline_cycles: int = 5  # sampled cycles summed into the topic baseline
    response: Literal["tighten", "verified_only"] = "tighten"  # emission while suspect
    raise_by: float = 0.1  # "tighten": the emission threshold is raised by this

    @classmethod
    def off(cls) -> SuspectLimits:
        """Limits no signal can pass (each is at most 1): the check never trips."""
        return cls(max_topic_js=1.0, max_top_topic_share=1.0, max_gap=1.0)


@dataclass(frozen=True)
class Signals:
    """One cycle's signals (None: not measurable this cycle)."""

    topic_js: float | None = None
    top_topic_share: float | None = None
    predicted: float | None = None
    verified: float | None = None
    verified_labels: int = 0

    @property
    def gap(self) -> float | None:
        if self.predicted is None or self.verified is None:
            return None
        return self.predicted - self.verified


def shares(counts: Mapping[str, int | float]) -> dict[str, float]:
    """Counts → shares (empty for no counts)."""
    total = float(sum(counts.values()))
    return {k: v / total for k, v in counts.items() if v > 0} if total > 0 else {}


def js_divergence(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Jensen–Shannon divergence of two distributions over topics, base 2: 0 (same) … 1 (disjoint)."""
    p, q = shares(p), shares(q)
    if not p or not q:
        return 0.0

    def kl(a: Mapping[str, float], m: Mapping[str, float]) -> float:
        return sum(v * math.log2(v / m[k]) for k, v in a.items() if v > 0)

    mid = {k: 0.5 * (p.get(k, 0.0) + q.get(k, 0.0)) for k in set(p) | set(q)}
    return max(0.0, min(1.0, 0.5 * kl(p, mid) + 0.5 * kl(q, mid)))


def baseline(base: Mapping[str, float], cycles: int, counts: Mapping[str, int], probes: str, base_probes: str,
             limits: SuspectLimits) -> tuple[dict[str, float], int]:
    """The topic baseline (summed counts) and the cycles in it after a cycle's ``counts``: summed over the
    first ``limits.baseline_cycles`` cycles, started again when the probes (``probes`` vs the baseline's
    ``base_probes``) changed."""
    if probes != base_probes:
        base, cycles = {}, 0
    if cycles >= limits.baseline_cycles:
        return dict(base), cycles
    out = dict(base)
    for k, v in counts.items():
        out[k] = out.get(k, 0.0) + v
    return out, cycles + 1


def signals(counts: Mapping[str, int], base: Mapping[str, float], u: UtilityView | None) -> Signals:
    """A cycle's signals: its valid-task topic ``counts`` against the baseline, and the gap of the labelled
    probe-high tasks (their mean probe probability vs their verified in-band share: like with like)."""
    return Signals(topic_js=js_divergence(counts, base), top_topic_share=max(shares(counts).values(), default=None),
                   predicted=u.labelled_predicted if u else None, verified=u.verified if u else None,
                   verified_labels=u.labels if u else 0)


def reasons(s: Signals, limits: SuspectLimits) -> list[str]:
    """The signals that say the probes are no longer trustworthy, in words (empty: none)."""
    out = []
    if s.topic_js is not None and s.topic_js > limits.max_topic_js:
        out.append(f"the sample's topics drifted from the baseline (JS divergence {s.topic_js:.2f} > "
                   f"{limits.max_topic_js:g})")
    if s.top_topic_share is not None and s.top_topic_share > limits.max_top_topic_share:
        out.append(f"one topic holds {s.top_topic_share:.0%} of valid tasks (> {limits.max_top_topic_share:.0%})")
    gap = s.gap
    if gap is not None and s.verified_labels >= limits.min_labels and gap > limits.max_gap:
        out.append(f"predicted utility {s.predicted:.0%} exceeds verified {s.verified:.0%} by {gap:.2f} "
                   f"(> {limits.max_gap:g}, {s.verified_labels} labels)")
    return out


def suspect_until(cycle: int, found: list[str], until: int, limits: SuspectLimits) -> int:
    """The last cycle the probes stay suspect: ``hold_cycles`` past the latest cycle a signal tripped."""
    return max(until, cycle + limits.hold_cycles) if found else until


def probes_suspect(cycle: int, until: int, why: list[str], last_why: str, response: str) -> Degradation | None:
    """The degradation while ``cycle ≤ until``; its detail names the signals and the response."""
    if cycle > until:
        return None
    said = "; ".join(why) if why else f"{last_why} (held until cycle {until})"
    return Degradation(PROBES_SUSPECT, f"the probes may be reward-hacked: {said}; acting: {response}")


def acting(limits: SuspectLimits) -> str:
    """The response in words (the degraded detail's tail)."""
    emit = ("only spot-check-verified tasks are emitted" if limits.response == "verified_only" else
            f"tasks are emitted only at probe probability raised by {limits.raise_by:g}")
    return f"{emit} and spot-checks go to the top-scored candidates"


def min_probability(base: float, suspect: bool, limits: SuspectLimits) -> float:
    """The emission threshold: raised while suspect under ``tighten`` (at most 1)."""
    return min(1.0, base + limits.raise_by) if suspect and limits.response == "tighten" else base
