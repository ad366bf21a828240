"""Is the generator hacking the probes? Cheap per-cycle signals without new solver calls, and a verdict (#34).

On the embedded default the generator learnt to please the frozen probes: emitted tasks were *less*
often in band than unfiltered samples, one topic took 99 % of valid tasks, validity crashed. The
signals, each computed from what the cycle already has:

* **topic drift** — Jensen–Shannon divergence (base 2, so in [0, 1]) between the topic histogram of
  the cycle's valid samples and the *baseline* histogram: the first sampled cycle of the run, drawn
  from the (almost) base policy the first probe's corpus was drawn from. Topics are what the domain
  already computes for every task, a histogram is a few dozen counts, and a probe trained on one topic
  mix is least trustworthy where the policy moved away from it — so this is the cheapest proxy for
  "the samples left the probes' training distribution" (no features, no extra forward pass).
* **top-topic share** — the flooding the alerts already watch, as a hard limit here.
* **predicted − verified gap** — when the window has enough labels (:mod:`daemon.loop.utility`): the
  probes' belief minus what the solver says about the same kind of task.

Ensemble disagreement is not used: the default ensemble has one member and the scorer returns the
combined score only.

When a signal trips, the probes are *suspect* for ``health.suspect_hold_cycles`` cycles (so a
borderline signal does not flap): the driver raises the ``probes_suspect`` degraded reason, emits only
spot-check-verified tasks and spends the spot-check allowance on the top-scored waiting candidates
(the tasks a hacked probe rates highest are where its false positives are, and verified in-band ones
can still be emitted). A validity collapse rolls the generator back (:mod:`daemon.loop.rollback`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from daemon.loop.health import PROBES_SUSPECT, Degradation


@dataclass(frozen=True)
class SuspectLimits:
    max_topic_js: float = 0.5  # JS divergence (bits) of the cycle's topics from the baseline
    max_top_topic_share: float = 0.8
    max_gap: float = 0.3  # predicted minus verified utility
    min_labels: int = 10  # labels the verified utility needs before the gap counts
    hold_cycles: int = 5

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


def probes_suspect(cycle: int, until: int, why: list[str], last_why: str) -> Degradation | None:
    """The degradation while ``cycle ≤ until``; its detail names the signals and the response."""
    if cycle > until:
        return None
    said = "; ".join(why) if why else f"{last_why} (held until cycle {until})"
    return Degradation(PROBES_SUSPECT, f"the probes may be reward-hacked: {said}; acting: only spot-check-verified "
                                       "tasks are emitted and spot-checks go to the top-scored candidates")
