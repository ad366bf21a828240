"""The phase driver: one call of :meth:`Driver.tick` runs one phase and persists the transition.

Every phase is safe to re-run after a crash: tasks are unique by content hash, trials by
(task, solver, attempt), metrics by (run, cycle, name), queue rows by task — so a daemon killed
mid-phase and restarted redoes that phase without duplicating anything. The state row is written
only after the phase's own writes committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select

from curriculum.domains.base import Validity
from curriculum.frontier.followed import Followed
from curriculum.labelling.spotcheck import select_candidates, trials_since
from curriculum.probing import retrain
from curriculum.reward.diversity import collapse_metrics
from curriculum.store import lineage, queue, repo
from curriculum.store.db import Store
from curriculum.store.models import (
    Label,
    MetricPoint,
    ProbeEnsembleRow,
    ProbeScore,
    QueueItem,
    SolverTrial,
    TaskRow,
)
from daemon.loop import follow, hacking, health, pacing
from daemon.loop.aux_retrain import AuxRetrain
from daemon.loop.frontier import FrontierTracker, collect_refresh, start_refresh
from daemon.loop.harvest import expire_spotchecks, harvest, merge_harvests
from daemon.loop.messages import frontier_message
from daemon.loop.phases import (
    Candidate,
    demand_sample_size,
    emission_plan,
    next_phase,
    should_retrain,
    top_share_threshold,
)
from daemon.loop.ports import DispatchError, Engine, Retrainer, Scored, SpotChecker
from daemon.loop.settings import DriverSettings
from daemon.loop.state import DriverState, PendingCheck, load_state
from daemon.loop.supply import TaskSupply, store_supplied
from daemon.loop.watch import HealthWatch
from daemon.ops.metrics import PropelMetrics, export_gauges, export_queue_depths, export_totals, observe_phase

log = logging.getLogger("propel.driver")

#: the untrained generator's prompts are drawn with the cycle's sample seed plus this: other prompts than the policy's
REFERENCE_SEED_OFFSET = 50_000_017


@dataclass
class CycleReport:
    """What a completed phase reports (the CLI prints it, tests inspect it)."""

    phase: str
    cycle: int
    seconds: float
    values: dict[str, float] = field(default_factory=dict)


class DriverHooks:
    """Observers of the driver (alert evaluation); the defaults do nothing."""

    def alerts(self, cycle: int, values: dict[str, float], dominant_topic: str | None, state: DriverState) -> None:
        """Evaluate alert rules on the cycle's metrics; apply mitigations by editing ``state``
        (``kl_factor``, ``force_retrain``, ``paused_topics``/``paused_by``)."""

    def degraded(self, state: dict[str, dict[str, Any]]) -> None:
        """Called with the degraded state (reason → detail, since, until) after each health check."""


class Driver(HealthWatch, AuxRetrain):
    """``metrics`` (optional) receives the Prometheus export; ``clock`` (aware UTC now) times spot-check
    and retrain deadlines, ``timer`` (seconds) the phases — both injectable for tests."""

    def __init__(self, store: Store, run_id: int, engine: Engine, spot: SpotChecker, retrainer: Retrainer,
                 settings: DriverSettings, hooks: DriverHooks | None = None,
                 should_stop: Callable[[], bool] = lambda: False, metrics: PropelMetrics | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 timer: Callable[[], float] = time.perf_counter, supply: TaskSupply | None = None) -> None:
        self.store, self.run_id, self.engine, self.s = store, run_id, engine, settings
        self.supply = supply  # a second generator's tasks (SWE agent), stored beside the policy's sample
        self.spot, self.retrainer = spot, retrainer
        self.hooks = hooks or DriverHooks()
        self.should_stop = should_stop
        self.metrics, self.clock, self.timer = metrics, clock, timer

    @property
    def followed(self) -> Followed:
        """The solver followed now: the spot-checker's, or a trainer's (``solver.follow``, daemon.loop.follow)."""
        return follow.followed(self.store, self.spot.solver_id, self.s.follow)

    @property
    def frontier(self) -> FrontierTracker:
        """Versions, drift and refresh of the followed solver (the spot-checker's ``solver_id`` is its name)."""
        f = self.followed
        return FrontierTracker(self.store, self.run_id, f.name, follow.frontier_settings(self.s.frontier, f.trainer),
                               self.s.band, self.s.seed, measured_by="consumer" if f.trainer else "spotcheck")

    # ---- state -------------------------------------------------------------------------------
    def state(self) -> tuple[str, int, DriverState]:
        """The stored phase, cycle and typed driver state (an old untyped row is converted)."""
        with self.store.session() as s:
            st = repo.load_state(s, self.run_id)
            return st.phase, st.cycle, load_state(st.counters, self.clock())

    def _save(self, phase: str, cycle: int, state: DriverState, sess: Any = None) -> None:
        if sess is not None:
            repo.save_state(sess, self.run_id, phase=phase, cycle=cycle, counters=state.stored())
            return
        with self.store.session() as s:
            repo.save_state(s, self.run_id, phase=phase, cycle=cycle, counters=state.stored())

    def _advance(self, phase: str, cycle: int, state: DriverState, sess: Any = None) -> None:
        nxt, done = next_phase(phase)
        self._save(nxt, cycle + int(done), state, sess)

    def tick(self) -> CycleReport:
        """Run the current phase once and move to the next."""
        phase, cycle, state = self.state()
        start = self.timer()
        handler = getattr(self, f"_phase_{phase}")
        values: dict[str, float] = handler(cycle, state)
        report = CycleReport(phase, cycle, self.timer() - start, values)
        self._phase_done(report, state)
        log.debug("cycle %d %s done in %.2fs %s", cycle, phase, report.seconds, values)  # the CLI prints it
        return report

    def _phase_done(self, report: CycleReport, saved: DriverState) -> None:
        """Store the phase's duration (``<phase>_seconds``) and export the histogram and saved totals."""
        with self.store.session() as s:
            repo.record_metrics(s, self.run_id, report.cycle, {f"{report.phase}_seconds": report.seconds})
        if self.metrics is None:
            return
        observe_phase(self.metrics, report.phase, report.seconds)
        cycles = report.cycle + int(next_phase(report.phase)[1])
        export_totals(self.metrics, {**saved.totals.model_dump(), "cycles": cycles})
        self.metrics.cycle.set(cycles)

    def _record(self, cycle: int, values: dict[str, float]) -> None:
        with self.store.session() as s:
            repo.record_metrics(s, self.run_id, cycle, values)
            depths = repo.queue_depths(s, self.run_id) if self.metrics is not None else {}
        if self.metrics is not None:
            export_gauges(self.metrics, values)
            export_queue_depths(self.metrics, depths)

    def _cycle_metrics(self, cycle: int) -> dict[str, float]:
        with self.store.session() as s:
            rows = s.execute(select(MetricPoint.name, MetricPoint.value).where(
                MetricPoint.run_id == self.run_id, MetricPoint.cycle == cycle))
            return {name: value for name, value in rows}

    # ---- phases --------------------------------------------------------------------------------
    def _phase_rl(self, cycle: int, state: DriverState) -> dict[str, float]:
        if self.s.rollback.on and state.healthy_step is not None:
            self.engine.pin_checkpoint(state.healthy_step)  # this chunk's pruning keeps the rollback target
        retrained = self._collect_retrain(state)  # an aux probe a worker finished constrains this chunk
        retrained |= collect_refresh(self, state)  # so does a promoted challenger primary
        stats = self.engine.rl_chunk(self.s.steps_per_chunk, self.should_stop, state.kl_factor)
        state.kl_factor = 1.0  # a raise_kl mitigation applies to one chunk
        self._record(cycle, {**{f"rl_{k}": v for k, v in stats.items()}, **retrained})
        self._advance("rl", cycle, state)
        return {**stats, **retrained}

    def _phase_sample(self, cycle: int, state: DriverState) -> dict[str, float]:
        n = self.s.sample_size
        if self.s.sample_size_max > n:  # trainers draining the queue: more candidates per RL chunk
            with self.store.session() as s:
                n = demand_sample_size(queue.ready_count(s, self.run_id), n, self.s.sample_size_max)
        texts = self.engine.sample(n, seed=self.s.seed * 100_003 + cycle)
        checks, scored = self._validate_and_score(texts)
        novel = self._store_sample(cycle, checks, scored)
        values, state.dominant_topic = self._sample_metrics(texts, checks, scored)
        values["sampled"] = float(n)
        if valid := sum(v.valid for v in checks):  # a repetition collapse: valid, mixed, and nothing new
            values["novel_share"] = novel / valid
        if scored is not None:
            values["predicted_utility"] = sum(scored.probabilities) / len(scored.probabilities)
        if self.s.emit_rollouts:  # the RL chunk's rollouts, already generated: candidates beside the sample
            batch = self.engine.rollouts()
            values |= self._store_extra(cycle, "rollouts", batch.texts,
                                        {"generator": "rl_rollout", "rl_steps": [batch.first_step, batch.end_step]})
        if (m := round(n * self.s.reference_share)) > 0:  # the untrained generator: candidates RL has not narrowed
            texts = self.engine.sample_reference(m, seed=self.s.seed * 100_003 + cycle + REFERENCE_SEED_OFFSET)
            values |= self._store_extra(cycle, "reference", texts, {"generator": "reference"})
        if self.supply is not None:  # finished agent bugs: same checks and lineage, their own provenance
            values |= store_supplied(self.store, self.run_id, self.engine, cycle,
                                     self.supply.take(self.s.seed * 100_003 + cycle))
        self._record(cycle, values)
        self._advance("sample", cycle, state)
        return values

    def _store_extra(self, cycle: int, kind: str, texts: Sequence[str], origin: dict[str, Any]) -> dict[str, float]:
        """Candidates beside the sample, as tasks of ``cycle``: the last RL chunk's rollouts (#35, generated
        already: a validity check and a probe score each) or the untrained generator's sample. They carry
        no ``generator_step``/``adapter_hash``: ``payload["generator"]`` says where they come from
        (``rl_rollout`` with the chunk's ``rl_steps``, or ``reference``). They stay out of the sample's
        metrics, which describe a fixed-size sample of the policy after the chunk."""
        if not texts:
            return {kind: 0.0}
        checks, scored = self._validate_and_score(texts)
        self._store_sample(cycle, checks, scored, origin)
        return {kind: float(len(checks)), f"{kind}_valid": float(sum(v.valid for v in checks))}

    def _validate_and_score(self, texts: Sequence[str]) -> tuple[list[Validity], Scored | None]:
        """The sample's one validate-and-score pass: every later use (stored rows, reward, RVP) reads it."""
        checks = list(self.engine.domain.validate_batch(list(texts)))
        ref_texts = [self.engine.domain.reference_text(v.task) for v in checks if v.valid]
        return checks, (self.engine.score(ref_texts) if ref_texts else None)

    def _store_sample(self, cycle: int, checks: Sequence[Validity], scored: Scored | None,
                      origin: dict[str, Any] | None = None) -> int:
        """Tasks, and their scores under the ensemble row of the scorer that produced them (lineage); returns how
        many distinct valid tasks were new to the store (the policy's sample only). ``origin`` (rollouts): payload
        keys that replace the policy's generator step and adapter hash."""
        prov = {} if origin else self.engine.provenance()
        new = [repo.NewTask(domain=v.task.domain, content_hash=v.task.content_hash, text=v.task.text, valid=v.valid,
                            payload={**v.task.payload, **(origin or {})}, invalid_reason=v.reason,
                            topic=self.engine.domain.topic(v.task) if v.valid else None, cycle=cycle,
                            generator_step=prov.get("generator_step"), adapter_hash=prov.get("adapter_hash"))
               for v in checks]
        valid_idx = [i for i, v in enumerate(checks) if v.valid]
        with self.store.session() as s:
            novel = repo.new_task_keys(s, [new[i] for i in valid_idx]) if origin is None else set()
            ids = repo.add_tasks(s, self.run_id, new)
            if scored is not None:
                ensemble_id = lineage.record_ensemble(s, self.run_id, scored.ensemble)
                lineage.record_probe_scores(s, ensemble_id, [(ids[i], lg, p) for i, lg, p in
                                                             zip(valid_idx, scored.logits, scored.probabilities,
                                                                 strict=True)])
        return len(novel)

    def _sample_metrics(self, texts: list[str], checks: Sequence[Validity], scored: Scored | None
                        ) -> tuple[dict[str, float], str | None]:
        """Validity, RVP (variance of the exact reward) and the fixed-size-sample diversity metrics."""
        valid_tasks = [v.task for v in checks if v.valid]
        diversity = collapse_metrics([t.text for t in valid_tasks], [self.engine.domain.topic(t) for t in valid_tasks],
                                     sample_size=self.s.diversity_sample_size, seed=self.s.seed)
        rewards = self.engine.rewards(checks, scored)
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        var = sum((r - mean) ** 2 for r in rewards) / len(rewards) if rewards else 0.0
        values = {"validity": len(valid_tasks) / max(1, len(texts)), "reward_mean": mean, "reward_var": var,
                  **diversity.as_metrics()}
        return values, diversity.dominant_topic

    def _phase_spotcheck(self, cycle: int, state: DriverState) -> dict[str, float]:
        follow.switch(followed := self.followed, state)
        if followed.trainer:  # known only through acks: no spot-checks (daemon.loop.follow)
            values, sid = follow.trainer_round(self, cycle, state), self.frontier.serving_id()
        else:
            values, sid = self._spotcheck_round(cycle, state)
        values["solver_trials"] = float(self._count_trials(state))
        values["emission_stalled"] = float(health.EMISSION_STALLED in state.degraded)  # the alert rule's metric
        sampled = self._cycle_metrics(cycle)  # the sample phase's validity and predicted utility
        values |= self._utility(cycle, sid, state, sampled.get("predicted_utility"))
        values |= self._probe_trust(cycle, state)
        values |= self._rollback_check(state, sampled)
        values |= self._end_long_pauses(cycle, state)
        self._record(cycle, values)
        # the cycle's sample and spot-check metrics are in: evaluate alerts before retrain and emit
        metrics = self._cycle_metrics(cycle)
        self.hooks.alerts(cycle, metrics, state.dominant_topic, state)
        # alerts' mitigations: measured, escalated when they fail
        escalated = self._escalate(cycle, state, metrics, trainer=bool(state.mitigations) and self.followed.trainer)
        if escalated:
            self._record(cycle, escalated)  # an escalation's rollback: the same metrics as a collapse's
            values |= escalated
        self._advance("spotcheck", cycle, state)
        return values

    def _spotcheck_round(self, cycle: int, state: DriverState) -> tuple[dict[str, float], str]:
        """Harvest, choose and dispatch the configured solver's spot-checks (with drift re-measurements)."""
        values = self._harvest(state)
        again, expired = expire_spotchecks(state, self.clock(), self.s.spotcheck_deadline_s,
                                           self.s.spotcheck_redispatches)
        sid = self.frontier.serving_id()  # name@current version, read per dispatch
        chosen, remeasure, used = self._choose_spotchecks(cycle, state, sid)
        now = self.clock()
        state.spotcheck_pending.update({t: PendingCheck(dispatched_at=now, solver_id=sid) for t in chosen})
        self._save("spotcheck", cycle, state)  # record the dispatch before it happens: a crash re-harvests
        retry = [t for t in state.spotcheck_undispatched if t in state.spotcheck_pending]
        self._dispatch_spotchecks(sorted(set(chosen) | set(again) | set(retry)), state)
        values = merge_harvests(values, self._harvest(state))  # in-process checks are done already
        values |= expired
        values |= self.frontier.observe_drift(cycle)
        values["spotcheck_dispatched"] = float(len(chosen))
        values["drift_remeasured"] = float(len(remeasure))
        state.totals.drift_remeasured += len(remeasure)
        self._spotcheck_health(used + len(chosen), state)
        values["solver_budget_used"] = (used + len(chosen)) / max(1, self.s.budget_per_hour)
        values["solver_budget_left"] = float(max(0, self.s.budget_per_hour - used - len(chosen)))
        if state.spot_bucket is not None and self.s.spot_burst is not None:
            values["spotcheck_tokens"] = state.spot_bucket.tokens
        return values, sid

    def _choose_spotchecks(self, cycle: int, state: DriverState, sid: str) -> tuple[list[int], list[int], int]:
        """This cycle's valid tasks untried on ``sid`` within budget (probe-high first) plus the drift
        re-measurements (part of the chosen ones); and trials used this hour."""
        # a stall or suspect probes: spend the allowance on the window's top-scored candidates (verified in-band
        # ones are emitted; a hacked probe's false positives are there)
        stalled = bool({health.EMISSION_STALLED, health.PROBES_SUSPECT} & set(state.degraded))
        with self.store.session() as s:
            tried = select(SolverTrial.task_id).where(SolverTrial.task_id == TaskRow.id, SolverTrial.solver_id == sid)
            query = (select(TaskRow.id, ProbeScore.probability).select_from(TaskRow)
                     .join(ProbeScore, lineage.latest_score_of(TaskRow.id), isouter=True)
                     .where(TaskRow.run_id == self.run_id, TaskRow.valid, ~tried.exists()))
            if stalled:
                queued = select(QueueItem.task_id).where(QueueItem.run_id == self.run_id)
                query = query.where(TaskRow.cycle > cycle - self.s.emit_lookback_cycles, TaskRow.cycle <= cycle,
                                    ~TaskRow.id.in_(queued))
            else:
                query = query.where(TaskRow.cycle == cycle)
            rows = s.execute(query).all()
        used = trials_since(self.store, self.spot.solver_id, seconds=3600)
        pace = pacing.Pace(self.s.budget_per_hour, self.s.budget_per_cycle, self.s.spot_burst)
        bucket = pacing.refill(state.spot_bucket, pace, self.clock(), used)
        budget = pacing.allowance(bucket, pace, used)  # the paced share of the hour, within both caps
        remeasure = self.frontier.plan_drift(cycle, state, budget)  # a new version: re-measure labelled tasks
        scored = [(int(r.id), float(r.probability or 0.0)) for r in rows if r.id not in state.spotcheck_pending]
        chosen = select_candidates(scored, budget - len(remeasure), 1.0 if stalled else self.s.probe_high_share,
                                   0.0 if stalled else self.s.frontier_threshold, seed=self.s.seed * 7919 + cycle)
        state.spot_bucket = pacing.spend(bucket, len(chosen) + len(remeasure))
        return chosen + remeasure, remeasure, used

    def _dispatch_spotchecks(self, task_ids: list[int], state: DriverState) -> None:
        """Send each check to the version the endpoint serves now (an unversioned one keeps the old call): a
        check chosen for an older version (sent again past its deadline, or after a broker outage) would be run
        by the new checkpoint, so it moves to the current version and is harvested under it (#37)."""
        if not task_ids:
            return
        cur = self.frontier.serving_id()
        by_sid: dict[str | None, list[int]] = {}
        for t in task_ids:
            check = state.spotcheck_pending.get(t)
            if check is not None and check.solver_id not in (None, cur):
                check = state.spotcheck_pending[t] = check.model_copy(update={"solver_id": cur})
            by_sid.setdefault(check.solver_id if check else None, []).append(t)
        try:
            for sid, ids in by_sid.items():
                if sid is None or sid == self.spot.solver_id:
                    self.spot.dispatch(ids, self.s.band.k)
                else:
                    self.spot.dispatch(ids, self.s.band.k, solver_id=sid)
            state.spotcheck_undispatched = []
        except DispatchError as err:  # broker down: RL goes on, dispatch is retried next cycle
            log.warning("%s", err)
            state.spotcheck_undispatched = task_ids

    def _count_trials(self, state: DriverState) -> int:
        """The solver trials stored for the run since the last spot-check phase (moved into the totals)."""
        with self.store.session() as s:
            total = repo.trial_count(s, self.run_id)
        delta = max(0, total - state.totals.solver_trials)
        state.totals.solver_trials = max(total, state.totals.solver_trials)
        return delta

    def _harvest(self, state: DriverState) -> dict[str, float]:
        return harvest(self.store, self.run_id, self.spot.solver_id, self.s.band, self.s.frontier_threshold, state)

    def _phase_retrain(self, cycle: int, state: DriverState) -> dict[str, float]:
        """Activate a finished aux probe; start a retrain when enough false positives piled up.

        A job's row is written before it is dispatched, so a crash between the two re-dispatches it
        (same name, idempotent). A worker's probe is activated at the first rl or retrain phase after
        it finished (before the next RL chunk at the latest).
        """
        values = self._collect_retrain(state)
        if state.retrain_job is None:
            forced, state.force_retrain = state.force_retrain, False
            if should_retrain(self._unconsumed_false_positives(), self.s.retrain_min_false_positives, forced):
                spec = self._retrain_spec(cycle, forced)
                retrain.create_job(self.store, spec)
                state.retrain_job = spec.name
                state.retrain_undispatched = True  # until handed over: a crash here re-sends it
                self._save("retrain", cycle, state)
                if self._submit_retrain(spec, state):
                    values |= self._collect_retrain(state)  # in-process: finished already
        values |= collect_refresh(self, state) | start_refresh(self, cycle, state)  # champion/challenger
        values.setdefault("retrained", 0.0)
        values["retrain_pending"] = float(state.retrain_job is not None)
        self._retrain_health(state)
        self._record(cycle, values)
        self._advance("retrain", cycle, state)
        return values

    # ---- degraded state (daemon.loop.health) ---------------------------------------------------
    def _health(self, state: DriverState, checks: dict[str, health.Degradation | None]) -> None:
        """Merge ``checks`` into ``state.degraded``; log what started and ended, once each."""
        merged, started, ended = health.merge(state.degraded, checks, self.clock())
        for d in started:
            log.warning("degraded: %s: %s", d.reason, d.detail, extra={"fields": {"degraded": d.reason}})
        for d in ended:
            log.warning("recovered: %s (degraded since %s)", d.reason, d.since,
                        extra={"fields": {"recovered": d.reason}})
        state.degraded = merged
        self.hooks.degraded(merged)

    def _spotcheck_health(self, used: int, state: DriverState) -> None:
        now = self.clock()
        since = min((c.dispatched_at for c in state.spotcheck_pending.values()), default=None)
        with self.store.session() as s:
            window = now - timedelta(hours=1)
            oldest, latest = s.execute(select(
                func.min(case((SolverTrial.created_at >= window, SolverTrial.created_at))),
                func.max(SolverTrial.created_at)).where(SolverTrial.solver_name == self.spot.solver_id)).one()
        self._health(state, {
            health.BUDGET: health.budget_exhausted(used, self.s.budget_per_hour, _aware(oldest)),
            health.WORKERS: health.workers_silent(len(state.spotcheck_pending), since, _aware(latest), now,
                                                  self.s.worker_silence_s),
            health.BROKER: health.broker_unreachable(len(state.spotcheck_undispatched))})

    def _phase_emit(self, cycle: int, state: DriverState) -> dict[str, float]:
        lo_cycle = cycle - self.s.emit_lookback_cycles + 1
        sid = self.frontier.serving_id()  # only the current version's verdict counts (older ones are stale)
        with self.store.session() as s:
            rows = s.execute(
                select(TaskRow, ProbeScore.probability, ProbeEnsembleRow.key.label("ensemble_key"), Label.in_band,
                       Label.solved, Label.valid_trials, Label.solver_id).select_from(TaskRow)
                .join(ProbeScore, lineage.latest_score_of(TaskRow.id))
                .join(ProbeEnsembleRow, ProbeEnsembleRow.id == ProbeScore.ensemble_id)
                .join(Label, (Label.task_id == TaskRow.id) & (Label.source == "spotcheck") & (Label.solver_id == sid)
                      & (Label.run_id == self.run_id), isouter=True)
                .where(TaskRow.run_id == self.run_id, TaskRow.valid, TaskRow.cycle >= lo_cycle)
                .where(~TaskRow.id.in_(select(QueueItem.task_id).where(QueueItem.run_id == self.run_id)))).all()
            ready = queue.ready_count(s, self.run_id)
            cands = [Candidate(r.TaskRow.id, float(r.probability), r.TaskRow.topic or "", r.in_band) for r in rows]
            self._health(state, {health.BACKPRESSURE: health.backpressure(ready, self.s.high_water_mark)})
            suspect = health.PROBES_SUSPECT in state.degraded  # suspect probes: a raised bar, or verified only
            verified = (health.verified_only(state.degraded, self.clock(), self.s.unverified_grace_s)
                        or (suspect and self.s.suspect.response == "verified_only"))
            bar = max(hacking.min_probability(self.s.min_probability, suspect, self.s.suspect),
                      top_share_threshold([float(r.probability) for r in rows if r.TaskRow.cycle == cycle],
                                          self.s.top_share))
            plan = set() if state.emission_paused_by else set(emission_plan(
                cands, min_probability=bar,
                max_topic_share=self.s.max_topic_share,
                high_water_mark=self.s.high_water_mark, ready_now=ready, paused_topics=frozenset(state.paused_topics),
                verified_only=verified))
            followed, prov = self.followed, self.engine.provenance()
            below = set(follow.below_bar_plan(
                cands, stalled=health.EMISSION_STALLED in state.degraded, ready=ready,
                paused=frozenset(state.paused_topics), max_topic_share=self.s.max_topic_share)
                if followed.trainer and not plan and not state.emission_paused_by else [])
            explore = set(follow.explore_picks(cands, sorted(plan | below), self.s.explore_share,
                                               frozenset(state.paused_topics), self.s.seed * 7_919 + cycle)
                          if followed.trainer else [])
            served = plan | below | explore
            picked = [r for r in rows if r.TaskRow.id in served]
            items = [(r.TaskRow.id, self.run_id, r.TaskRow.topic,
                      follow.mark(frontier_message(r, prov, self.s, self.engine.domain, followed.name),
                                  r.TaskRow.id in explore, r.TaskRow.id in below)) for r in picked]
            emitted = queue.enqueue(s, items)
            state.totals.emitted += emitted
            # served below the bar, the stall stands: only a task that passed the gate ends it
            self._emission_health(state, cands, 0 if below else emitted, ready, verified, bar, followed.trainer)
            self._advance("emit", cycle, state, sess=s)  # outbox: queue rows, state and totals in one transaction
            texts, topics = [r.TaskRow.text for r in picked], [r.TaskRow.topic for r in picked]
        self.engine.observe_emitted(texts, topics)  # the reward's diversity archive (a re-run observes again: no-op)
        values = {"emitted": float(emitted), "queue_ready": float(ready + emitted),
                  "emit_idle_cycles": float(state.emit_idle_cycles), "emitted_explore": float(len(explore)),
                  "emitted_below_bar": float(len(below)),
                  "backpressure": float(ready >= self.s.high_water_mark),
                  "emission_paused": float(bool(state.emission_paused_by))}
        self._record(cycle, values)
        return values


def _aware(t: datetime | None) -> datetime | None:
    """SQLite returns naive UTC datetimes; PostgreSQL aware ones."""
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t
