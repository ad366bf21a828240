"""The driver's aux-probe retraining (the retrain phase's jobs), one mixin so the phase driver stays readable.

A job's row is written before it is dispatched (``curriculum.probing.retrain``); the driver's retrain
phase decides when to start one, this mixin writes its spec, hands it to the retrainer, collects its
outcome, activates the probe it trained (or restores the previous set when it cannot be loaded), and
reports a failing or silent retrainer through the driver's degraded-state merge (``_health``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING

from curriculum.probing import retrain
from curriculum.store import lineage, repo
from curriculum.store.db import Store
from daemon.loop import health
from daemon.loop.ports import DispatchError, Engine, Retrainer
from daemon.loop.settings import DriverSettings
from daemon.loop.state import DriverState

if TYPE_CHECKING:
    from daemon.loop.frontier import FrontierTracker

log = logging.getLogger("propel.driver")


class AuxRetrain:
    """Mixed into :class:`daemon.loop.driver.Driver`."""

    store: Store
    run_id: int
    engine: Engine
    retrainer: Retrainer
    s: DriverSettings
    clock: Callable[[], datetime]

    # the driver's own members, declared here for the type checker
    _health: Callable[[DriverState, dict[str, health.Degradation | None]], None]

    if TYPE_CHECKING:
        @property
        def frontier(self) -> FrontierTracker: ...

    def _unconsumed_false_positives(self) -> int:
        """False positives no active aux probe was trained on (the ``false_positives`` table is the source)."""
        with self.store.session() as s:
            return len(lineage.false_positive_tasks(s, self.run_id, unconsumed_only=True))

    def _retrain_spec(self, cycle: int, collapse_topic: bool) -> retrain.RetrainSpec:
        ref, band = self.engine.reference_info(), self.s.band
        return retrain.RetrainSpec(
            run_id=self.run_id, name=f"{self.s.run_name}-aux-c{cycle}", cycle=cycle, reference=ref.model,
            reference_fingerprint=ref.fingerprint, layer=ref.layer, pooling=ref.pooling, k=band.k, band_lo=band.lo,
            band_hi=band.hi, min_valid_trials=band.min_valid_trials, threshold=self.s.frontier_threshold,
            arch=self.s.probe_arch, collapse_topic=collapse_topic, seed=self.s.seed + cycle,
            solver=self.frontier.name, staleness=asdict(self.s.frontier.staleness))

    def _submit_retrain(self, spec: retrain.RetrainSpec, state: DriverState) -> bool:
        """Hand the job over; False (and retried at the next retrain phase) when the broker is down."""
        try:
            self.retrainer.submit(spec)
        except DispatchError as err:
            log.warning("%s", err)
            state.retrain_undispatched = True
            return False
        state.retrain_undispatched = False
        return True

    def _collect_retrain(self, state: DriverState) -> dict[str, float]:
        """Look at the pending job: activate its probe when done; give up on it after the timeout."""
        job = retrain.settle_job(self.store, state.retrain_job, self.clock(), self.s.retrain_timeout_s)
        if job is None:
            state.retrain_job = None
            return {}
        if job.state == "pending":
            if state.retrain_undispatched:
                self._submit_retrain(job.spec, state)
            return {}
        state.retrain_job = None
        if job.state == "failed":
            state.retrain_failures += 1
            state.retrain_last_error = str(job.reason or "")[:200]
        if job.state != "done" or job.probe_id is None:
            log.warning("aux-probe retrain %s %s: %s", job.name, job.state, job.reason)
            return {"retrained": 0.0, f"retrain_{job.state}": 1.0}
        with self.store.session() as s:
            active = repo.active_probes(s, self.run_id)
            before = [p.id for p in active]
            primaries = [p.id for p in active if p.role == "primary"]
            repo.set_active_probes(s, [*primaries, job.probe_id], self.run_id)
        try:
            self._reload_probes()
        except ValueError as err:  # the probe cannot be fetched or verified here: keep the current reward
            return self._reject_probe(job.name, before, err)
        with self.store.session() as s:
            lineage.mark_false_positives_consumed(s, self.run_id, list(job.false_positive_ids))
        state.totals.retrains += 1
        state.retrain_failures = 0
        log.info("aux probe %s active (%d false positives as negatives)", job.name, len(job.false_positive_ids))
        return {"retrained": 1.0, "retrain_negatives_fp": float(len(job.false_positive_ids))}

    def _reject_probe(self, job_name: str, previous: list[int], err: Exception) -> dict[str, float]:
        """Restore the previous active set and record the finished job as failed, with the reason."""
        log.warning("aux probe %s cannot be activated: %s", job_name, err)
        with self.store.session() as s:
            repo.set_active_probes(s, previous, self.run_id)
        self._reload_probes()
        retrain.reject_job(self.store, job_name, f"activation failed: {err}")
        return {"retrained": 0.0, "retrain_failed": 1.0}

    def _reload_probes(self) -> None:
        with self.store.session() as s:
            active = repo.active_probes(s, self.run_id)
        self.engine.load_probes([p.artifact_uri for p in active if p.role == "primary"],
                                [p.artifact_uri for p in active if p.role == "aux"])

    def _retrain_health(self, state: DriverState) -> None:
        name = state.retrain_job
        job = retrain.job_outcome(self.store, name) if name else None
        age = (self.clock() - job.created_at).total_seconds() if job and job.state == "pending" else None
        self._health(state, {
            health.RETRAIN: health.retrain_failing(state.retrain_failures, state.retrain_last_error),
            health.RETRAIN_WAITING: health.retrain_waiting(name, age, self.s.worker_silence_s)})
