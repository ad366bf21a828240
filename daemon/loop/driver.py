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
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update

from curriculum import retrain
from curriculum.diversity import collapse_metrics
from curriculum.domains.base import Task
from curriculum.spotcheck import (
    Band,
    budget_left,
    false_positives,
    harvest_labels,
    select_candidates,
    trials_since,
)
from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, Label, MetricPoint, ProbeScore, QueueItem, SolverTrial, TaskRow
from daemon.loop.phases import Candidate, emission_plan, next_phase, should_retrain
from daemon.loop.ports import DispatchError, Engine, Retrainer, SpotChecker
from propel_sdk.schema import FrontierTask, Provenance, SpotCheck

log = logging.getLogger("propel.driver")


@dataclass(frozen=True)
class DriverSettings:
    run_name: str
    seed: int = 0
    steps_per_chunk: int = 10
    sample_size: int = 64
    band: Band = field(default_factory=Band)
    budget_per_cycle: int = 32
    budget_per_hour: int = 512
    probe_high_share: float = 0.75
    frontier_threshold: float = 0.5
    retrain_min_false_positives: int = 8
    min_probability: float = 0.5
    max_topic_share: float = 0.4
    high_water_mark: int = 10_000
    emit_lookback_cycles: int = 3
    diversity_sample_size: int = 256
    reference_model: str = ""
    probe_arch: str = "mlp"
    probe_dir: str = "probes"  # aux-probe artifacts (distributed: a path the workers share)
    retrain_timeout_s: float = 3600.0  # a pending retrain with no outcome after this is marked failed


@dataclass
class CycleReport:
    """What a completed phase reports (the CLI prints it, tests inspect it)."""

    phase: str
    cycle: int
    seconds: float
    values: dict[str, float] = field(default_factory=dict)


class DriverHooks:
    """Observers of the driver (Prometheus export, alert evaluation); the defaults do nothing."""

    def export(self, cycle: int, values: dict[str, float]) -> None:
        """Called with every batch of metric values the driver records."""

    def alerts(self, cycle: int, values: dict[str, float], dominant_topic: str | None,
               counters: dict[str, Any]) -> None:
        """Evaluate alert rules on the cycle's metrics; apply mitigations by editing ``counters``."""


class Driver:
    def __init__(self, store: Store, run_id: int, engine: Engine, spot: SpotChecker, retrainer: Retrainer,
                 settings: DriverSettings, hooks: DriverHooks | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.store, self.run_id, self.engine, self.s = store, run_id, engine, settings
        self.spot, self.retrainer = spot, retrainer
        self.hooks = hooks or DriverHooks()
        self.should_stop = should_stop

    # ---- state -------------------------------------------------------------------------------
    def state(self) -> tuple[str, int, dict[str, Any]]:
        with self.store.session() as s:
            st = repo.load_state(s, self.run_id)
            return st.phase, st.cycle, dict(st.counters)

    def _advance(self, phase: str, cycle: int, counters: dict[str, Any], sess: Any = None) -> None:
        nxt, done = next_phase(phase)
        if sess is not None:
            repo.save_state(sess, self.run_id, phase=nxt, cycle=cycle + int(done), counters=counters)
            return
        with self.store.session() as s:
            repo.save_state(s, self.run_id, phase=nxt, cycle=cycle + int(done), counters=counters)

    def tick(self) -> CycleReport:
        """Run the current phase once and move to the next."""
        phase, cycle, counters = self.state()
        start = time.perf_counter()
        handler = getattr(self, f"_phase_{phase}")
        values: dict[str, float] = handler(cycle, counters)
        report = CycleReport(phase, cycle, time.perf_counter() - start, values)
        log.info("cycle %d %s done in %.2fs %s", cycle, phase, report.seconds, values)
        return report

    def _record(self, cycle: int, values: dict[str, float]) -> None:
        with self.store.session() as s:
            repo.record_metrics(s, self.run_id, cycle, values)
        self.hooks.export(cycle, values)

    def _cycle_metrics(self, cycle: int) -> dict[str, float]:
        with self.store.session() as s:
            rows = s.execute(select(MetricPoint.name, MetricPoint.value).where(
                MetricPoint.run_id == self.run_id, MetricPoint.cycle == cycle))
            return {name: value for name, value in rows}

    # ---- phases --------------------------------------------------------------------------------
    def _phase_rl(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        retrained = self._collect_retrain(counters)  # an aux probe a worker finished constrains this chunk
        stats = self.engine.rl_chunk(self.s.steps_per_chunk, self.should_stop, float(counters.get("kl_factor", 1.0)))
        counters["kl_factor"] = 1.0  # a raise_kl mitigation applies to one chunk
        self._record(cycle, {**{f"rl_{k}": v for k, v in stats.items()}, **retrained})
        self._advance("rl", cycle, counters)
        return {**stats, **retrained}

    def _phase_sample(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        texts = self.engine.sample(self.s.sample_size, seed=self.s.seed * 100_003 + cycle)
        validities = self.engine.domain.validate_batch(texts)
        valid_idx = [i for i, v in enumerate(validities) if v.valid]
        ref_texts = [self.engine.domain.reference_text(validities[i].task) for i in valid_idx]
        scored = self.engine.score(ref_texts) if ref_texts else None
        prov = self.engine.provenance()
        new = [repo.NewTask(domain=v.task.domain, content_hash=v.task.content_hash, text=v.task.text, valid=v.valid,
                            payload=v.task.payload, invalid_reason=v.reason,
                            topic=self.engine.domain.topic(v.task) if v.valid else None, cycle=cycle,
                            generator_step=prov.get("generator_step"), adapter_hash=prov.get("adapter_hash"))
               for v in validities]
        with self.store.session() as s:
            ids = repo.add_tasks(s, self.run_id, new)
            primary = repo.primary_probe_id(s, self.run_id)
            if scored is not None and primary is not None:
                repo.record_probe_scores(s, primary, [(ids[i], lg, p) for i, lg, p in
                                                      zip(valid_idx, scored.logits, scored.probabilities, strict=True)])
        values, counters["dominant_topic"] = self._sample_metrics(texts, validities, valid_idx)
        if scored is not None:
            values["predicted_utility"] = sum(scored.probabilities) / len(scored.probabilities)
        self._record(cycle, values)
        self._advance("sample", cycle, counters)
        return values

    def _sample_metrics(self, texts: list[str], validities: Sequence[Any], valid_idx: list[int]
                        ) -> tuple[dict[str, float], str | None]:
        """Validity, RVP (variance of the exact reward) and the fixed-size-sample diversity metrics."""
        valid_tasks = [validities[i].task for i in valid_idx]
        diversity = collapse_metrics([t.text for t in valid_tasks], [self.engine.domain.topic(t) for t in valid_tasks],
                                     sample_size=self.s.diversity_sample_size, seed=self.s.seed)
        rewards = self.engine.rewards(texts)
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        var = sum((r - mean) ** 2 for r in rewards) / len(rewards) if rewards else 0.0
        values = {"validity": len(valid_idx) / max(1, len(texts)), "reward_mean": mean, "reward_var": var,
                  **diversity.as_metrics()}
        return values, diversity.dominant_topic

    def _phase_spotcheck(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        values = self._harvest(cycle, counters)
        pending = set(counters.get("spotcheck_pending", []))
        with self.store.session() as s:
            primary = repo.primary_probe_id(s, self.run_id)
            tried = select(SolverTrial.task_id).where(SolverTrial.task_id == TaskRow.id,
                                                      SolverTrial.solver_id == self.spot.solver_id)
            rows = s.execute(
                select(TaskRow.id, ProbeScore.probability)
                .join(ProbeScore, (ProbeScore.task_id == TaskRow.id) & (ProbeScore.probe_id == primary), isouter=True)
                .where(TaskRow.run_id == self.run_id, TaskRow.cycle == cycle, TaskRow.valid, ~tried.exists())).all()
        used = trials_since(self.store, self.spot.solver_id, seconds=3600)
        budget = budget_left(used, self.s.budget_per_hour, self.s.budget_per_cycle)
        scored = [(int(r.id), float(r.probability or 0.0)) for r in rows if r.id not in pending]
        chosen = select_candidates(scored, budget, self.s.probe_high_share, self.s.frontier_threshold,
                                   seed=self.s.seed * 7919 + cycle)
        counters["spotcheck_pending"] = sorted(pending | set(chosen))
        with self.store.session() as s:  # record the dispatch before it happens: a crash re-harvests
            repo.save_state(s, self.run_id, phase="spotcheck", cycle=cycle, counters=counters)
        retry = [t for t in counters.get("spotcheck_undispatched", []) if t in pending]
        to_send = sorted(set(chosen) | set(retry))
        if to_send:
            try:
                self.spot.dispatch(to_send, self.s.band.k)
                counters["spotcheck_undispatched"] = []
            except DispatchError as err:  # broker down: RL goes on, dispatch is retried next cycle
                log.warning("%s", err)
                counters["spotcheck_undispatched"] = to_send
        values.update(self._harvest(cycle, counters))  # in-process checks are done already
        values["spotcheck_dispatched"] = float(len(chosen))
        values["solver_budget_used"] = (used + len(chosen)) / max(1, self.s.budget_per_hour)
        values["solver_trials"] = float(trials_since(self.store, self.spot.solver_id, 3600, distinct_tasks=False))
        self._record(cycle, values)
        # the cycle's sample and spot-check metrics are in: evaluate alerts before retrain and emit
        self.hooks.alerts(cycle, self._cycle_metrics(cycle), counters.get("dominant_topic"), counters)
        self._advance("spotcheck", cycle, counters)
        return values

    def _harvest(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        """Label tasks whose trials all landed; mine false positives; compute precision metrics."""
        pending = list(counters.get("spotcheck_pending", []))
        if not pending:
            return {}
        labels = harvest_labels(self.store, pending, self.spot.solver_id, self.s.band)
        with self.store.session() as s:
            primary = repo.primary_probe_id(s, self.run_id)
            probs = {t: p for t, p in s.execute(select(ProbeScore.task_id, ProbeScore.probability).where(
                ProbeScore.task_id.in_(list(labels)), ProbeScore.probe_id == primary))}
            labelled = [(t, True, float(probs.get(t, 0.0)), lab) for t, lab in labels.items()]
            fps = false_positives(labelled, self.s.frontier_threshold, self.s.band)
            if primary is not None:
                repo.add_false_positives(s, primary, fps)
        counters["spotcheck_pending"] = sorted(set(pending) - set(labels))
        counters["fp_since_retrain"] = int(counters.get("fp_since_retrain", 0)) + len(fps)
        known = [lab for lab in labels.values() if lab.in_band is not None]
        high = [t for t, _, p, lab in labelled if p >= self.s.frontier_threshold and lab.in_band is not None]
        out = {"labelled": float(len(labels)), "false_positives": float(len(fps))}
        if known:
            out["spotcheck_utility"] = sum(1 for lab in known if lab.in_band) / len(known)
        if high:
            out["probe_precision"] = sum(1 for t in high if labels[t].in_band) / len(high)
            out["false_positive_rate"] = len(fps) / len(high)
        return out

    def _phase_retrain(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        """Activate a finished aux probe; start a retrain when enough false positives piled up.

        A job's row is written before it is dispatched, so a crash between the two re-dispatches it
        (same name, idempotent). A worker's probe is activated at the first rl or retrain phase after
        it finished (before the next RL chunk at the latest).
        """
        values = self._collect_retrain(counters)
        if counters.get("retrain_job") is None:
            forced = bool(counters.pop("force_retrain", False))
            if should_retrain(int(counters.get("fp_since_retrain", 0)), self.s.retrain_min_false_positives, forced):
                spec = self._retrain_spec(cycle, forced)
                retrain.create_job(self.store, spec)
                counters["retrain_job"] = spec.name
                counters["retrain_undispatched"] = True  # until handed over: a crash here re-sends it
                with self.store.session() as s:
                    repo.save_state(s, self.run_id, phase="retrain", cycle=cycle, counters=counters)
                if self._submit_retrain(spec, counters):
                    values |= self._collect_retrain(counters)  # in-process: finished already
        values.setdefault("retrained", 0.0)
        values["retrain_pending"] = float(bool(counters.get("retrain_job")))
        self._record(cycle, values)
        self._advance("retrain", cycle, counters)
        return values

    def _retrain_spec(self, cycle: int, collapse_topic: bool) -> retrain.RetrainSpec:
        ref, band = self.engine.reference_info(), self.s.band
        return retrain.RetrainSpec(
            run_id=self.run_id, name=f"{self.s.run_name}-aux-c{cycle}", cycle=cycle, reference=ref.model,
            reference_fingerprint=ref.fingerprint, layer=ref.layer, pooling=ref.pooling, k=band.k, band_lo=band.lo,
            band_hi=band.hi, min_valid_trials=band.min_valid_trials, threshold=self.s.frontier_threshold,
            arch=self.s.probe_arch, collapse_topic=collapse_topic, artifact_dir=self.s.probe_dir,
            seed=self.s.seed + cycle)

    def _submit_retrain(self, spec: retrain.RetrainSpec, counters: dict[str, Any]) -> bool:
        """Hand the job over; False (and retried at the next retrain phase) when the broker is down."""
        try:
            self.retrainer.submit(spec)
        except DispatchError as err:
            log.warning("%s", err)
            counters["retrain_undispatched"] = True
            return False
        counters["retrain_undispatched"] = False
        return True

    def _collect_retrain(self, counters: dict[str, Any]) -> dict[str, float]:
        """Look at the pending job: activate its probe when done; give up on it after the timeout."""
        name = counters.get("retrain_job")
        job = retrain.job_outcome(self.store, name) if name else None
        if job is None:
            counters.pop("retrain_job", None)
            return {}
        if job.state == "pending":
            age = (datetime.now(UTC) - job.created_at).total_seconds()
            if age > self.s.retrain_timeout_s:
                retrain.finish_job(self.store, job.name, "failed", f"no outcome after {age:.0f} s")
                return self._collect_retrain(counters)
            if counters.get("retrain_undispatched"):
                self._submit_retrain(job.spec, counters)
            return {}
        counters.pop("retrain_job")
        if job.state != "done" or job.probe_id is None:
            log.warning("aux-probe retrain %s %s: %s", job.name, job.state, job.reason)
            return {"retrained": 0.0, f"retrain_{job.state}": 1.0}
        with self.store.session() as s:
            primaries = [p.id for p in repo.active_probes(s, self.run_id) if p.role == "primary"]
            repo.set_active_probes(s, [*primaries, job.probe_id], self.run_id)
            s.execute(update(FalsePositive).where(FalsePositive.task_id.in_(list(job.false_positive_ids)))
                      .values(consumed=True))
        self._reload_probes()
        counters["fp_since_retrain"] = 0
        log.info("aux probe %s active (%d false positives as negatives)", job.name, len(job.false_positive_ids))
        return {"retrained": 1.0, "retrain_negatives_fp": float(len(job.false_positive_ids))}

    def _reload_probes(self) -> None:
        with self.store.session() as s:
            active = repo.active_probes(s, self.run_id)
        self.engine.load_probes([p.artifact_uri for p in active if p.role == "primary"],
                                [p.artifact_uri for p in active if p.role == "aux"])

    def _phase_emit(self, cycle: int, counters: dict[str, Any]) -> dict[str, float]:
        lo_cycle = cycle - self.s.emit_lookback_cycles + 1
        with self.store.session() as s:
            primary = repo.primary_probe_id(s, self.run_id)
            rows = s.execute(
                select(TaskRow, ProbeScore.probability, Label.in_band, Label.solved, Label.valid_trials,
                       Label.solver_id)
                .join(ProbeScore, (ProbeScore.task_id == TaskRow.id) & (ProbeScore.probe_id == primary))
                .join(Label, (Label.task_id == TaskRow.id) & (Label.source == "spotcheck"), isouter=True)
                .where(TaskRow.run_id == self.run_id, TaskRow.valid, TaskRow.cycle >= lo_cycle)
                .where(~TaskRow.id.in_(select(QueueItem.task_id).where(QueueItem.run_id == self.run_id)))).all()
            ready = queue.ready_count(s, self.run_id)
            cands = [Candidate(r.TaskRow.id, float(r.probability), r.TaskRow.topic or "", r.in_band) for r in rows]
            plan = set(emission_plan(cands, min_probability=self.s.min_probability,
                                     max_topic_share=self.s.max_topic_share, high_water_mark=self.s.high_water_mark,
                                     ready_now=ready, paused_topics=frozenset(counters.get("paused_topics", []))))
            prov = self.engine.provenance()
            items = [(r.TaskRow.id, self.run_id, r.TaskRow.topic, self._message(r, prov)) for r in rows
                     if r.TaskRow.id in plan]
            emitted = queue.enqueue(s, items)
            counters["emitted_total"] = int(counters.get("emitted_total", 0)) + emitted
            self._advance("emit", cycle, counters, sess=s)  # outbox: queue rows + state in one transaction
        values = {"emitted": float(emitted), "queue_ready": float(ready + emitted),
                  "backpressure": float(ready >= self.s.high_water_mark)}
        self._record(cycle, values)
        return values

    def _message(self, r: Any, prov: dict[str, Any]) -> dict[str, Any]:
        task = r.TaskRow
        check = None if r.in_band is None and r.solved is None else SpotCheck(
            solver=r.solver_id, solved=r.solved, valid_trials=r.valid_trials, k=self.s.band.k, in_band=r.in_band)
        dom_task = Task(task.domain, task.text, dict(task.payload))
        msg = FrontierTask(
            id=task.id, domain=task.domain, solver_prompt=self.engine.domain.solver_prompt(dom_task),
            grading=dict(task.payload), predicted_in_band=float(r.probability), spot_check=check, topic=task.topic,
            solver=self.spot.solver_id,
            band=(self.s.band.lo, self.s.band.hi), k=self.s.band.k, created_at=task.created_at,
            provenance=Provenance(generator_step=task.generator_step, adapter_hash=task.adapter_hash,
                                  probe_ensemble_id=prov.get("probe_ensemble_id"),
                                  reference_model=self.s.reference_model,
                                  reference_fingerprint=prov.get("reference_fingerprint"), run=self.s.run_name))
        return msg.model_dump(mode="json")
