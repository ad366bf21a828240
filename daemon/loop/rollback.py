"""Roll the generator back to a healthy checkpoint when validity collapses (#34), as pure rules.

Unpaced, the embedded default's validity fell to 0–5 % (cycles 91, 100–101) and ``raise_kl`` did not
bring it back. A cycle is *healthy* when its sample's validity is at least ``healthy_validity`` —
validity alone: suspect probes or an open alert say nothing about the generator's checkpoint (judging
on them froze the target in the long run, which rolled back to step 490 six times). The driver
remembers the healthy cycle's generator step and keeps that checkpoint from being pruned
(``pin_checkpoint``). When validity stays below ``validity`` for ``cycles`` cycles in a row, the
generator is rolled back to the last healthy step — never twice to the same step without a healthy
cycle in between (:func:`repeated`): then it is logged and counted instead, and an escalation goes on
to its next level. ``validity = 0`` turns rollback off.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RollbackRule:
    validity: float = 0.0  # collapse: sample validity below this … (0: never roll back)
    cycles: int = 3  # … for this many cycles in a row
    healthy_validity: float = 0.9  # a cycle at or above this, with trusted probes, marks its checkpoint healthy

    @property
    def on(self) -> bool:
        return self.validity > 0


def is_healthy(validity: float, rule: RollbackRule) -> bool:
    """The generator's checkpoint is judged on validity alone."""
    return validity >= rule.healthy_validity


def repeated(wanted: int | None, rolled_back_to: int | None) -> bool:
    """Rolling back to ``wanted`` again, with no healthy cycle since the last rollback to it."""
    return wanted is not None and wanted == rolled_back_to


def low_streak(before: int, validity: float, rule: RollbackRule) -> int:
    """Consecutive cycles with validity below the collapse limit."""
    return before + 1 if validity < rule.validity else 0


def target(streak: int, rule: RollbackRule, healthy_step: int | None, current_step: int) -> int | None:
    """The step to roll back to, or None (no collapse yet, no healthy step known, or already there)."""
    if not rule.on or streak < rule.cycles or healthy_step is None or healthy_step >= current_step:
        return None
    return healthy_step


def collapse(rule: RollbackRule, last_validity: float) -> str:
    """Why a validity rollback is due, in words."""
    return f"validity below {rule.validity:.0%} for {rule.cycles} cycles in a row (last {last_validity:.0%})"


def describe(rule: RollbackRule, why: str, current_step: int, restored: int | None, wanted: int) -> str:
    """The log line of a rollback (or of one that found no checkpoint); ``why``: the collapse or the escalation."""
    if restored is None:
        return (f"{why}: cannot roll the generator back to step {wanted} (the last healthy one): no checkpoint at or "
                "before it is recorded")
    return (f"{why}: generator rolled back from step {current_step:,} to step {restored:,}, the last cycle with "
            f"validity ≥ {rule.healthy_validity:.0%}")


def describe_repeat(why: str, wanted: int) -> str:
    """The log line of a rollback refused because it would repeat the last one."""
    return (f"{why}: not rolling the generator back to step {wanted:,} again (rolled back there already, no healthy "
            "cycle since)")
