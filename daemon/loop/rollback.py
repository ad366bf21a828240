"""Roll the generator back to a healthy checkpoint when validity collapses (#34), as pure rules.

Unpaced, the embedded default's validity fell to 0–5 % (cycles 91, 100–101) and ``raise_kl`` did not
bring it back. A cycle is *healthy* when its sample's validity is at least ``healthy_validity``, the
probes are not suspect (:mod:`daemon.loop.hacking`) and no alert mitigation is still being measured
(:mod:`daemon.loop.escalation`); the driver remembers its generator step and
keeps that checkpoint from being pruned (``pin_checkpoint``). When validity stays below ``validity``
for ``cycles`` cycles in a row, the generator is rolled back to the last healthy step.
``validity = 0`` turns rollback off.
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


def is_healthy(validity: float, doubtful: bool, rule: RollbackRule) -> bool:
    """``doubtful``: the probes are suspect, or an alert's mitigation is still being measured."""
    return not doubtful and validity >= rule.healthy_validity


def low_streak(before: int, validity: float, rule: RollbackRule) -> int:
    """Consecutive cycles with validity below the collapse limit."""
    return before + 1 if validity < rule.validity else 0


def target(streak: int, rule: RollbackRule, healthy_step: int | None, current_step: int) -> int | None:
    """The step to roll back to, or None (no collapse yet, no healthy step known, or already there)."""
    if not rule.on or streak < rule.cycles or healthy_step is None or healthy_step >= current_step:
        return None
    return healthy_step


def describe(rule: RollbackRule, last_validity: float, current_step: int, restored: int | None, wanted: int) -> str:
    """The log line of a rollback (or of one that found no checkpoint)."""
    why = (f"validity below {rule.validity:.0%} for {rule.cycles} cycles in a row (last {last_validity:.0%})")
    if restored is None:
        return (f"{why}: cannot roll the generator back to step {wanted} (the last healthy one): no checkpoint at or "
                "before it is recorded")
    return (f"{why}: generator rolled back from step {current_step:,} to step {restored:,}, the last cycle with "
            f"validity ≥ {rule.healthy_validity:.0%}, trusted probes and no open mitigation")
