"""Emission never stops silently (#34): pure rules for a stalled emission and what to say about it.

A daemon restarted after its generator had hacked the frozen probes emitted nothing for 140+ cycles
(no valid task scored above 0.494 against the 0.5 threshold) with no degraded reason and no alert.
Now every emit phase that emits nothing while the queue has room counts one idle cycle; after
``emission.stall_cycles`` of them (default 10) the driver raises the ``emission_stalled`` degraded
reason, records ``emission_stalled = 1`` (the default alert rule of the same name fires on it, its
message carrying the detail below) and acts: the next spot-check allowances go to the top-scored
candidates still waiting to be emitted (the emit phase's look-back window), so verified in-band
labels — which emission trusts whatever the probe says — can be emitted. The first emitted task ends
the stall. A followed trainer has no spot-checks: its stall is answered by serving the top-scored
candidates below the bar (:func:`daemon.loop.follow.below_bar_plan`), and only a task that passes the gate
ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from daemon.loop.health import EMISSION_STALLED, Degradation
from daemon.loop.phases import Candidate


@dataclass(frozen=True)
class StallFacts:
    """Why the emit phase emitted nothing: the candidates of its look-back window, by kind."""

    candidates: int  # valid tasks of the window not yet in the queue
    best_unverified: float | None  # highest probe score among unchecked candidates of unpaused topics
    threshold: float  # emission.min_probability
    verified_only: bool  # the gate: probe predictions, or spot-check-verified tasks only
    verified_in_band: int
    verified_out_of_band: int
    paused: int  # candidates of paused topics

    @property
    def gate(self) -> str:
        if self.verified_only:
            return "spot-check-verified tasks only (labels missing too long, or the probes are suspect)"
        return "probe predictions or a verified in-band label"


def stall_facts(cands: Sequence[Candidate], *, min_probability: float, paused_topics: frozenset[str],
                verified_only: bool) -> StallFacts:
    """Count the emit phase's candidates (:func:`daemon.loop.phases.emission_plan` takes the same inputs)."""
    open_ = [c for c in cands if c.topic not in paused_topics]
    unverified = [c.probability for c in open_ if c.in_band is None]
    return StallFacts(candidates=len(cands), best_unverified=max(unverified, default=None),
                      threshold=min_probability, verified_only=verified_only,
                      verified_in_band=sum(1 for c in open_ if c.in_band is True),
                      verified_out_of_band=sum(1 for c in cands if c.in_band is False),
                      paused=len(cands) - len(open_))


def idle_cycles(before: int, emitted: int, queue_full: bool) -> int:
    """Consecutive cycles without an emitted task; a full queue (backpressure) is not a stall."""
    if emitted > 0 or queue_full:
        return 0
    return before + 1


#: What the daemon does about a stall, by the followed solver's kind (a trainer has no spot-check endpoint).
ACTING = {False: "spot-checks go to the top-scored candidates so verified in-band tasks can be emitted",
          True: "while the queue is empty, the top-scored quarter of the candidates is served below the bar "
                "(message \"below_bar\": true) so the trainer's acks label them"}


def emission_stalled(idle: int, limit: int, facts: StallFacts, trainer: bool = False) -> Degradation | None:
    """The degradation once ``idle`` reaches ``limit`` (0 disables the check), saying why and what is done
    (``trainer``: the followed solver is a trainer's, whose stall is answered below the bar)."""
    if limit <= 0 or idle < limit:
        return None
    if facts.candidates == 0:
        why = "no valid task was sampled in the emit window"
    elif facts.best_unverified is None:
        why = "no unverified candidate of an unpaused topic was left"
    else:
        why = f"the best unverified candidate scored {facts.best_unverified:.3f}"
    head = "no task passed the gate" if trainer else "no task emitted"
    return Degradation(EMISSION_STALLED, (
        f"{head} for {idle} cycles: {why} against the emission bar {facts.threshold:.3g} "
        f"(gate: {facts.gate}); {facts.candidates:,} valid candidates: {facts.verified_in_band:,} verified in band, "
        f"{facts.verified_out_of_band:,} verified out of band, {facts.paused:,} in paused topics; acting: "
        f"{ACTING[trainer]}"))
