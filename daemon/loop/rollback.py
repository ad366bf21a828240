"""Roll the generator back to a healthy checkpoint when validity or the topic mix collapses (#34), as pure rules.

Unpaced, the embedded default's validity fell to 0–5 % (cycles 91, 100–101) and ``raise_kl`` did not
bring it back. A cycle is *healthy* when its sample's validity is at least ``healthy_validity`` —
validity alone: suspect probes or an open alert say nothing about the generator's checkpoint (judging
on them froze the target in the long run, which rolled back to step 490 six times). The driver
remembers the healthy cycle's generator step and keeps that checkpoint from being pruned
(``pin_checkpoint``). When validity stays below ``validity`` for ``cycles`` cycles in a row, the
generator is rolled back to the last healthy step — never twice to the same step without a healthy
cycle in between (:func:`repeated`): then it is logged (once) and counted instead, and an escalation goes on
to its next level. One exception: a *validity* collapse after a cycle whose validity was back at
``healthy_validity`` (its topic mix may still be collapsed) is a new collapse, not the rollback failing,
and rolls back to the same step again. Without it the followed LM trainer's daemon, rolled back once for
its topic mix, then sampled 0 % valid tasks for 70+ cycles and served nothing (closed_loop, replay-off
seed 1, 926077f). ``validity = 0`` turns the validity rollback off.

**Topic collapse.** Left alone, the generator put 0.96 of its valid tasks on one topic by cycle ~24,
and the reward's topic-share term (:mod:`curriculum.reward.topic_share`) only delays that: GRPO's
within-group normalisation cannot pull an already collapsed policy back. So a cycle is healthy only when
its top-topic share is also at most ``healthy_top_topic_share``, and when the top-topic share stays above
``top_topic_share`` for ``cycles`` cycles in a row the generator is rolled back to that healthy checkpoint
(same pinning, same no-repeat rule). ``top_topic_share = 1`` turns it off.

**Repetition collapse.** A policy can stay valid and mixed while sampling almost only tasks the store
already holds: a duplicate is never stored or emitted again, so supply dries up with every chart green.
The followed LM trainer's daemon did (closed_loop, replay-off seed 0, 926077f: 98–100 % valid, 1–2
candidates in the emit window, about one new valid task every two cycles, the trainer starved). The
repetition penalty (:mod:`curriculum.reward.novelty`) cannot pull it back: once every member of a GRPO
group repeats, their penalties are equal and the group has no signal. The sample's *novel share* — the
share of its valid tasks that are new to the store (and not repeated within the sample) — measures it.
A cycle is healthy only when its novel share is also at least ``healthy_novelty``, and when it stays below
``novelty`` for ``cycles`` cycles in a row the generator is rolled back (same pinning, same no-repeat rule,
with the validity rule's exception: a repetition collapse after the novel share was back at
``healthy_novelty`` rolls back to the same step again; without it the followed LM trainer's daemon refused
every rollback for 200+ cycles at ~1 % new tasks, its topic mix keeping every cycle from being healthy).
``novelty = 0`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RollbackRule:
    validity: float = 0.0  # collapse: sample validity below this … (0: never roll back on validity)
    cycles: int = 3  # … (or top-topic share above top_topic_share) for this many cycles in a row
    healthy_validity: float = 0.9  # a cycle at or above this … marks its checkpoint healthy
    top_topic_share: float = 1.0  # collapse: top-topic share above this … (1: never roll back on topics)
    healthy_top_topic_share: float = 1.0  # … with a top-topic share at most this
    novelty: float = 0.0  # collapse: novel share below this for ``cycles`` cycles (0: never roll back on it)
    healthy_novelty: float = 0.0  # … and a novel share at least this

    @property
    def on(self) -> bool:
        return self.validity > 0 or self.top_topic_share < 1 or self.novelty > 0


def is_healthy(validity: float, rule: RollbackRule, top_topic_share: float | None = None,
               novel_share: float | None = None) -> bool:
    """The generator's checkpoint is judged on its sample: validity, topic mix and novelty (not on the probes)."""
    mixed = top_topic_share is None or top_topic_share <= rule.healthy_top_topic_share
    novel = novel_share is None or novel_share >= rule.healthy_novelty
    return validity >= rule.healthy_validity and mixed and novel


def repeated(wanted: int | None, rolled_back_to: int | None, revalidated: bool = False) -> bool:
    """Rolling back to ``wanted`` again, with no healthy cycle since the last rollback to it (``revalidated``: a
    validity or repetition collapse after that signal was back at its healthy level is a new collapse, not a
    repeat)."""
    return wanted is not None and wanted == rolled_back_to and not revalidated


def low_streak(before: int, validity: float, rule: RollbackRule) -> int:
    """Consecutive cycles with validity below the collapse limit."""
    return before + 1 if validity < rule.validity else 0


def high_topic_streak(before: int, top_topic_share: float | None, rule: RollbackRule) -> int:
    """Consecutive cycles with the top-topic share above the collapse limit (no valid task: the streak holds)."""
    if top_topic_share is None:
        return before
    return before + 1 if top_topic_share > rule.top_topic_share else 0


def low_novelty_streak(before: int, novel_share: float | None, rule: RollbackRule) -> int:
    """Consecutive cycles with the novel share below the collapse limit (no valid task: the streak holds)."""
    if novel_share is None:
        return before
    return before + 1 if novel_share < rule.novelty else 0


def target(streak: int, rule: RollbackRule, healthy_step: int | None, current_step: int) -> int | None:
    """The step to roll back to, or None (no collapse yet, no healthy step known, or already there)."""
    if not rule.on or streak < rule.cycles or healthy_step is None or healthy_step >= current_step:
        return None
    return healthy_step


def collapse(rule: RollbackRule, last_validity: float) -> str:
    """Why a validity rollback is due, in words."""
    return f"validity below {rule.validity:.0%} for {rule.cycles} cycles in a row (last {last_validity:.0%})"


def topic_collapse(rule: RollbackRule, last_share: float) -> str:
    """Why a topic rollback is due, in words."""
    return (f"top-topic share above {rule.top_topic_share:.0%} for {rule.cycles} cycles in a row "
            f"(last {last_share:.0%})")


def novelty_collapse(rule: RollbackRule, last_share: float) -> str:
    """Why a repetition rollback is due, in words."""
    return (f"new tasks below {rule.novelty:.0%} of the valid sample for {rule.cycles} cycles in a row "
            f"(last {last_share:.0%}: the generator repeats stored tasks)")


def describe(rule: RollbackRule, why: str, current_step: int, restored: int | None, wanted: int) -> str:
    """The log line of a rollback (or of one that found no checkpoint); ``why``: the collapse or the escalation."""
    if restored is None:
        return (f"{why}: cannot roll the generator back to step {wanted} (the last healthy one): no checkpoint at or "
                "before it is recorded")
    mix = f" and top-topic share ≤ {rule.healthy_top_topic_share:.0%}" if rule.healthy_top_topic_share < 1 else ""
    mix += f" and new tasks ≥ {rule.healthy_novelty:.0%}" if rule.healthy_novelty > 0 else ""
    return (f"{why}: generator rolled back from step {current_step:,} to step {restored:,}, the last cycle with "
            f"validity ≥ {rule.healthy_validity:.0%}{mix}")


def describe_repeat(why: str, wanted: int) -> str:
    """The log line of a rollback refused because it would repeat the last one."""
    return (f"{why}: not rolling the generator back to step {wanted:,} again (rolled back there already, no healthy "
            "cycle since)")
