"""Pure scheduling decisions of the daemon (no I/O; tested with tables).

One cycle is ``rl → sample → spotcheck → retrain → emit``; the phase and counters live in the
store so a restarted daemon continues where it stopped.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

PHASES: tuple[str, ...] = ("rl", "sample", "spotcheck", "retrain", "emit")


def next_phase(phase: str) -> tuple[str, bool]:
    """The phase after ``phase`` and whether that step completes a cycle."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}")
    i = PHASES.index(phase)
    return PHASES[(i + 1) % len(PHASES)], i == len(PHASES) - 1


def should_retrain(new_false_positives: int, min_false_positives: int, collapse_alert: bool) -> bool:
    """Retrain the aux probe when enough new false positives were mined, or on a collapse alert."""
    return collapse_alert or (min_false_positives > 0 and new_false_positives >= min_false_positives)


@dataclass(frozen=True)
class Candidate:
    """A task that may be emitted: probe probability, topic, spot-check verdict (None: unchecked)."""

    task_id: int
    probability: float
    topic: str
    in_band: bool | None = None


def demand_sample_size(ready: int, base: int, cap: int) -> int:
    """Tasks to sample this cycle: ``base`` while the queue holds enough, up to ``cap`` while it runs dry.

    The cycle's fixed cost is its RL chunk (building the GRPO trainer, the steps, the checkpoint);
    sampling costs per task. When trainers drain the queue faster than a cycle of ``base`` refills it,
    sampling more per cycle spreads the fixed cost over more candidates: ``cap − ready`` (an empty queue
    gets ``cap``), never below ``base``. ``cap ≤ base`` turns the rule off."""
    return max(base, min(cap, cap - max(0, ready)))


def emission_plan(candidates: Sequence[Candidate], *, min_probability: float, max_topic_share: float,
                  high_water_mark: int, ready_now: int, paused_topics: frozenset[str] = frozenset(),
                  verified_only: bool = False) -> list[int]:
    """Which tasks to emit, in order.

    * spot-checked out-of-band tasks are never emitted; verified in-band tasks come first, then by
      probability (highest first); unverified tasks need ``probability ≥ min_probability``;
    * no topic takes more than ``ceil(max_topic_share × eligible)`` places (flooding guard), and
      paused topics (an alert mitigation) take none;
    * backpressure: at most ``high_water_mark − ready_now`` tasks (none when the queue is full);
    * ``verified_only`` (spot-check labels missing for too long, see :mod:`daemon.loop.health`):
      only verified in-band tasks.
    """
    eligible = [c for c in candidates if c.in_band is not False and c.topic not in paused_topics
                and (c.in_band is True or (not verified_only and c.probability >= min_probability))]
    eligible.sort(key=lambda c: (c.in_band is not True, -c.probability, c.task_id))
    cap = max(1, math.ceil(max_topic_share * len(eligible)))
    per_topic: Counter[str] = Counter()
    chosen: list[int] = []
    room = max(0, high_water_mark - ready_now)
    for c in eligible:
        if len(chosen) >= room:
            break
        if per_topic[c.topic] >= cap:
            continue
        per_topic[c.topic] += 1
        chosen.append(c.task_id)
    return chosen


def top_share_threshold(scores: Sequence[float], top_share: float) -> float:
    """The lowest probe probability inside the top ``top_share`` of ``scores`` (one cycle's valid samples):
    an emission threshold relative to what the policy samples now. An absolute threshold stops selecting
    once RL has pushed most samples above it (the probe is what RL maximises); a share keeps selecting.
    0.0 (no bar) when ``top_share ≥ 1`` or there are no scores."""
    if top_share >= 1.0 or not scores:
        return 0.0
    ranked = sorted(scores, reverse=True)
    return ranked[max(1, math.ceil(top_share * len(ranked))) - 1]


def dominant_topic(topics: Sequence[str]) -> tuple[str | None, float]:
    """The most common topic and its share (None, 0.0 for an empty sample)."""
    if not topics:
        return None, 0.0
    topic, n = Counter(topics).most_common(1)[0]
    return topic, n / len(topics)
