"""Mitigations that escalate (#34): each applied mitigation is measured, and escalated when it fails.

On the embedded default, ``pause_topic``, ``retrain_aux_topic`` and ``raise_kl`` moved a topic collapse
from one topic to the next (``sub:4`` → ``add:5`` → ``mul:3``) and never stopped it. Now every mitigation
an alert applies is recorded with the metric its rule watches, that metric's value and the cycle
(:class:`Applied`, kept in the driver state). Each cycle :func:`decide` compares the metric with the
rule's condition:

* the condition no longer holds → the mitigation *worked*: the record is dropped (and emission, if
  an escalation paused it, resumes);
* it still holds ``escalate_after`` cycles after the last step → *escalate* one level:
  ``mitigation`` → ``rollback`` (the generator to its last healthy checkpoint,
  :mod:`daemon.loop.rollback`) → ``pause_emission`` (nothing is emitted until the metric is back).

Every step is logged as one readable line (:func:`describe`). Following a trainer, the last level is not
taken for a metric its acks measure (:data:`ACK_MEASURED`, :func:`blind_pause`): the pause would stop
the acks, and with them the measurement (the LM trainer waited through five 30-cycle pauses, three of them
on ``probe_precision_low``, each ended with the metric still unmeasured). A pause lasts at most
``health.max_paused_cycles`` (:func:`expired`); when the rule's alert resolves (or the rule leaves the
config), its record is dropped by the alerts hook (:func:`drop_resolved`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from daemon.ops.alerts.evaluation import AlertEvent, mitigation_words

LEVELS: tuple[str, ...] = ("mitigation", "rollback", "pause_emission")
#: Metrics that a followed trainer's acks measure (daemon.loop.follow.mine_acks): pausing emission to the
#: trainer stops its acks, so such a pause cannot bring its metric back and is not taken.
ACK_MEASURED: frozenset[str] = frozenset({"probe_precision", "false_positive_rate", "trainer_utility",
                                          "trainer_too_easy"})
COMPARE: dict[str, Callable[[float, float], bool]] = {">": operator.gt, ">=": operator.ge, "<": operator.lt,
                                                      "<=": operator.le}
Decision = Literal["wait", "worked", "escalate"]


class Applied(BaseModel):
    """A mitigation an alert applied, and where its escalation stands."""

    model_config = ConfigDict(extra="forbid")
    rule: str
    kind: str  # the alert's mitigation: pause_topic, retrain_aux_topic, raise_kl
    topic: str | None = None
    metric: str
    comparator: str
    threshold: float
    value: float  # the metric when the current level was applied
    cycle: int  # the cycle the current level was applied
    level: int = 0  # index into LEVELS

    @property
    def holds(self) -> Callable[[float], bool]:
        return lambda v: COMPARE[self.comparator](v, self.threshold)

    @property
    def action(self) -> str:
        """The current level in words."""
        if self.level == 0:
            return mitigation_words(self.kind, self.topic, None)
        return {"rollback": "a generator rollback", "pause_emission": "pausing emission"}[LEVELS[self.level]]


def record(current: Sequence[Applied], fired: Sequence[AlertEvent]) -> list[Applied]:
    """Add the mitigations of ``fired`` alerts (a rule's new firing replaces its old record)."""
    new = [Applied(rule=e.rule, kind=e.mitigation.kind.value, topic=e.mitigation.topic, metric=e.spec.metric,
                   comparator=e.spec.comparator.value, threshold=e.spec.threshold, value=float(e.value), cycle=e.cycle)
           for e in fired if e.mitigation is not None and e.spec is not None and e.value is not None]
    rules = {a.rule for a in new}
    return [a for a in current if a.rule not in rules] + new


def decide(a: Applied, cycle: int, value: float | None, escalate_after: int) -> Decision:
    """What to do with ``a`` at ``cycle`` given the metric's ``value`` (None: not measured this cycle)."""
    if value is None:
        return "wait"
    if not a.holds(value):
        return "worked"
    if escalate_after > 0 and cycle - a.cycle >= escalate_after and a.level < len(LEVELS) - 1:
        return "escalate"
    return "wait"


def escalated(a: Applied, cycle: int, value: float, skip_rollback: bool) -> Applied:
    """The next level (a rollback that cannot happen — off, or no healthy checkpoint — is skipped)."""
    level = a.level + 1
    if LEVELS[level] == "rollback" and skip_rollback:
        level += 1
    return a.model_copy(update={"level": level, "cycle": cycle, "value": value})


def blind_pause(nxt: Applied, trainer: bool) -> bool:
    """``nxt`` would pause emission to a followed trainer on a metric only the trainer's acks measure."""
    return trainer and LEVELS[nxt.level] == "pause_emission" and nxt.metric in ACK_MEASURED


def describe_blind_pause(a: Applied, cycle: int, value: float) -> str:
    """The log line of a pause not taken (:func:`blind_pause`)."""
    return (f"{_not_back(a, cycle, value)}; emission is not paused: the followed trainer's acks measure {a.metric}, "
            "and a pause would stop them")


def _head(a: Applied) -> str:
    return f"alert {a.rule}: {a.action} (applied at cycle {a.cycle:,} with {a.metric} {a.value:.3g})"


def _not_back(a: Applied, cycle: int, value: float) -> str:
    return (f"{_head(a)} did not bring {a.metric} back ({a.comparator} {a.threshold:g}) within {cycle - a.cycle} "
            f"cycles (now {value:.3g})")


def describe(a: Applied, decision: Decision, cycle: int, value: float, nxt: Applied | None = None) -> str:
    """One readable line for a mitigation that worked or is escalated."""
    if decision == "worked":
        return (f"{_head(a)} worked: {a.metric} is {value:.3g} at cycle {cycle:,}, no longer {a.comparator} "
                f"{a.threshold:g}")
    return f"{_not_back(a, cycle, value)}: escalating to {nxt.action if nxt else 'nothing'}"


def drop_resolved(current: Sequence[Applied], resolved: Sequence[str]) -> list[Applied]:
    """The records left once the rules ``resolved`` (alert resolved, or rule removed) are dropped."""
    return [a for a in current if a.rule not in set(resolved)]


def expired(current: Sequence[Applied], cycle: int, max_paused: int) -> tuple[list[Applied], list[Applied]]:
    """(kept, ended): emission pauses older than ``max_paused`` cycles end (0: never)."""
    def over(a: Applied) -> bool:
        return LEVELS[a.level] == "pause_emission" and max_paused > 0 and cycle - a.cycle >= max_paused
    return [a for a in current if not over(a)], [a for a in current if over(a)]


def describe_expired(a: Applied, cycle: int) -> str:
    """The log line of an emission pause that ran out."""
    return (f"alert {a.rule}: emission paused since cycle {a.cycle:,} and {a.metric} still not back "
            f"({a.comparator} {a.threshold:g}) at cycle {cycle:,}: the pause ends (health.max_paused_cycles)")
