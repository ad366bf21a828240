"""The driver's always-on health checks (#34), one mixin so the phase driver stays readable.

Each method is the driver-side half of a pure module: :mod:`daemon.loop.utility` (verified vs
predicted utility), :mod:`daemon.loop.hacking` (probes suspect), :mod:`daemon.loop.rollback`
(validity collapse), :mod:`daemon.loop.escalation` (mitigations measured and escalated) and
:mod:`daemon.loop.emission_watch` (emission stalled). They read the store and the engine, edit the
driver state, and report through the driver's degraded-state merge (``_health``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy import func, select

from curriculum.store.db import Store
from curriculum.store.models import TaskRow
from daemon.loop import emission_watch, escalation, hacking, health, rollback, utility
from daemon.loop.phases import Candidate
from daemon.loop.ports import Engine
from daemon.loop.settings import DriverSettings
from daemon.loop.state import DriverState

log = logging.getLogger("propel.driver")


class HealthWatch:
    """Mixed into :class:`daemon.loop.driver.Driver`."""

    store: Store
    run_id: int
    engine: Engine
    s: DriverSettings

    # the driver's own method, declared here for the type checker
    _health: Callable[[DriverState, dict[str, health.Degradation | None]], None]

    def _utility(self, cycle: int, sid: str, state: DriverState, predicted: float | None) -> dict[str, float]:
        """Verified utility of the window next to the cycle's predicted utility (daemon.loop.utility)."""
        window = self.s.verified_window_cycles
        in_band, labelled, prob = utility.verified_counts(self.store, self.run_id, sid, cycle, window,
                                                          self.s.min_probability)
        state.utility = utility.view(cycle, predicted, in_band, labelled, window, prob)
        out = {"verified_labels": float(labelled)}
        if state.utility.verified is not None:
            out["verified_utility"] = state.utility.verified
        return out

    def _probe_trust(self, cycle: int, state: DriverState) -> dict[str, float]:
        """The cycle's hacking signals and verdict (daemon.loop.hacking): probes_suspect while they trip."""
        with self.store.session() as s:
            counts = {str(t): int(n) for t, n in s.execute(
                select(TaskRow.topic, func.count()).where(TaskRow.run_id == self.run_id, TaskRow.cycle == cycle,
                                                          TaskRow.valid).group_by(TaskRow.topic))}
        if not counts:
            return {}
        probes = str(self.engine.provenance().get("probe_ensemble_id") or "")
        state.topic_baseline, state.topic_baseline_cycles = hacking.baseline(
            state.topic_baseline, state.topic_baseline_cycles, counts, probes, state.topic_baseline_probes,
            self.s.suspect)
        state.topic_baseline_probes = probes  # new probes (promotion, aux probe): a new baseline
        sig = hacking.signals(counts, state.topic_baseline, state.utility)
        why = hacking.reasons(sig, self.s.suspect)
        state.suspect_until = hacking.suspect_until(cycle, why, state.suspect_until, self.s.suspect)
        state.suspect_why = "; ".join(why) or state.suspect_why
        self._health(state, {health.PROBES_SUSPECT: hacking.probes_suspect(
            cycle, state.suspect_until, why, state.suspect_why, hacking.acting(self.s.suspect))})
        return {"topic_js": sig.topic_js or 0.0, "probes_suspect": float(health.PROBES_SUSPECT in state.degraded)}

    def _rollback_check(self, state: DriverState, sampled: dict[str, float]) -> dict[str, float]:
        """Remember the last healthy generator step; roll back to it when validity, the topic mix or the share of
        new tasks (``sampled``: the sample phase's metrics) collapses."""
        rule, validity = self.s.rollback, sampled.get("validity")
        if not rule.on or validity is None:
            return {}
        top_share, novel = sampled.get("top_topic_share"), sampled.get("novel_share")
        step = int(self.engine.provenance().get("generator_step") or 0)
        if rollback.is_healthy(validity, rule, top_share, novel):  # the sample alone: suspect probes say nothing
            state.healthy_step = step
        if validity >= rule.healthy_validity:
            state.valid_since_rollback = True
        if novel is not None and novel >= max(rule.healthy_novelty, rule.novelty):
            state.novel_since_rollback = True
        state.low_validity_cycles = rollback.low_streak(state.low_validity_cycles, validity, rule)
        # a topic share (or novel share) over the few valid tasks of a validity collapse says nothing: streaks hold
        valid_enough = validity >= rule.validity
        state.high_topic_cycles = rollback.high_topic_streak(
            state.high_topic_cycles, top_share if valid_enough else None, rule)
        state.low_novelty_cycles = rollback.low_novelty_streak(
            state.low_novelty_cycles, novel if valid_enough else None, rule)
        streak = max(state.low_validity_cycles, state.high_topic_cycles, state.low_novelty_cycles)
        wanted = rollback.target(streak, rule, state.healthy_step, step)
        if wanted is None:
            return {}
        invalid = state.low_validity_cycles >= rule.cycles
        repeating = not invalid and state.low_novelty_cycles >= rule.cycles
        if invalid:
            why = rollback.collapse(rule, validity)
        elif repeating:
            why = rollback.novelty_collapse(rule, novel or 0.0)
        else:
            why = rollback.topic_collapse(rule, top_share or 0.0)
        state.low_validity_cycles = state.high_topic_cycles = state.low_novelty_cycles = 0
        # a validity or repetition collapse after that signal came back is a new collapse, not the rollback failing
        again = (invalid and state.valid_since_rollback) or (repeating and state.novel_since_rollback)
        return self._roll_back(state, wanted, step, why, revalidated=again)

    def _roll_back(self, state: DriverState, wanted: int, step: int, why: str,
                   revalidated: bool = False) -> dict[str, float]:
        """Roll the generator back to ``wanted`` (one log line and the same metrics for a collapse and an
        escalation); never twice to the same step without a healthy cycle since (``revalidated``: a validity or
        repetition collapse after that signal was back, see :func:`daemon.loop.rollback.repeated`)."""
        if rollback.repeated(wanted, state.rolled_back_to, revalidated):
            if state.refusal_said != wanted:  # once, not every cycle the collapse lasts (117 lines on one LM run)
                log.warning("%s (said once; the rollback_repeated metric counts each)",
                            rollback.describe_repeat(why, wanted))
                state.refusal_said = wanted
            return {"rolled_back": 0.0, "rollback_repeated": 1.0}
        restored = self.engine.rollback(wanted)
        log.warning("%s", rollback.describe(self.s.rollback, why, step, restored, wanted))
        if restored is None:
            state.healthy_step = None  # not recorded: the next healthy cycle sets a new one
            return {"rolled_back": 0.0}
        state.totals.rollbacks += 1
        state.rolled_back_to = state.healthy_step = restored
        state.valid_since_rollback = state.novel_since_rollback = False
        state.refusal_said = None
        return {"rolled_back": 1.0, "rollback_step": float(restored)}

    def _end_long_pauses(self, cycle: int, state: DriverState) -> dict[str, float]:
        """Emission pauses past ``health.max_paused_cycles`` end, logged (the metric an alert rule watches)."""
        state.mitigations, ended = escalation.expired(state.mitigations, cycle, self.s.max_paused_cycles)
        for a in ended:
            log.warning("%s", escalation.describe_expired(a, cycle))
        return {"emission_pause_expired": float(len(ended))}

    def _escalate(self, cycle: int, state: DriverState, metrics: dict[str, float],
                  trainer: bool = False) -> dict[str, float]:
        """Measure each applied mitigation; drop it when its metric is back, escalate it when it is not
        (``trainer``: the followed solver is a trainer's, whose acks a pause would stop)."""
        kept: list[escalation.Applied] = []
        out: dict[str, float] = {}
        for a in state.mitigations:
            value = metrics.get(a.metric)
            decision = escalation.decide(a, cycle, value, self.s.escalate_after_cycles)
            if decision == "wait" or value is None:
                kept.append(a)
                continue
            if decision == "worked":
                log.info("%s", escalation.describe(a, decision, cycle, value))
                continue
            step = int(self.engine.provenance().get("generator_step") or 0)
            target = rollback.target(1, replace(self.s.rollback, cycles=1), state.healthy_step, step)
            skip = target is None or rollback.repeated(target, state.rolled_back_to)  # not again: next level
            nxt = escalation.escalated(a, cycle, value, skip_rollback=skip)
            if escalation.blind_pause(nxt, trainer):  # measured again after another escalate_after cycles
                log.warning("%s", escalation.describe_blind_pause(a, cycle, value))
                kept.append(a.model_copy(update={"cycle": cycle, "value": value}))
                continue
            log.warning("%s", escalation.describe(a, decision, cycle, value, nxt))
            if escalation.LEVELS[nxt.level] == "rollback" and target is not None:
                out |= self._roll_back(state, target, step, f"alert {a.rule} escalated")
            kept.append(nxt)
        state.mitigations = kept
        paused = [a for a in kept if escalation.LEVELS[a.level] == "pause_emission"]
        state.emission_paused_by = [a.rule for a in paused]
        lines = {a.rule: f"alert {a.rule} ({a.metric} {a.comparator} {a.threshold:g})" for a in paused}
        self._health(state, {health.EMISSION_PAUSED: health.emission_paused(state.emission_paused_by, lines)})
        return out

    def _emission_health(self, state: DriverState, cands: list[Candidate], emitted: int, ready: int,
                         verified: bool, bar: float, trainer: bool = False) -> None:
        """Count the cycles without an emitted task; past the limit, degraded with why (emission_watch).
        ``bar``: the score an unverified task needed (emission.min_probability, raised while the probes are
        suspect, or the cycle's emission.top_share bar); ``trainer``: the followed solver is a trainer's (the
        stall's response is then to serve below the bar, daemon.loop.follow)."""
        held = ready >= self.s.high_water_mark or bool(state.emission_paused_by)  # paused on purpose: not a stall
        state.emit_idle_cycles = emission_watch.idle_cycles(state.emit_idle_cycles, emitted, held)
        facts = emission_watch.stall_facts(cands, min_probability=bar,
                                           paused_topics=frozenset(state.paused_topics), verified_only=verified)
        self._health(state, {health.EMISSION_STALLED: emission_watch.emission_stalled(
            state.emit_idle_cycles, self.s.emission_stall_cycles, facts, trainer=trainer)})
