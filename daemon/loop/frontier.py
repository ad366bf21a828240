"""The driver's view of a moving solver: which version spot-checks are recorded against, drift
re-measurement after a new version, and when to refresh the primary probe.

The driver calls :class:`FrontierTracker` from its phases (small hooks):

* :meth:`~FrontierTracker.serving_id` at every spot-check dispatch — the qualified id
  ``name@version`` of the solver's *current* version, read from the store, so an announce moves the
  spot-check endpoint's version on without restarting anything;
* :meth:`~FrontierTracker.plan_drift` — on a new current version, open a drift measurement over a
  stratified sample of already-labelled tasks and spend up to ``drift_budget_share`` of the cycle's
  spot-check budget re-measuring them;
* :meth:`~FrontierTracker.observe_drift` — fold the new labels into the transition matrix and score;
* :meth:`~FrontierTracker.refresh_due` — drift above the threshold (or enough new labels) asks for a
  champion/challenger primary-probe refresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select

from curriculum.domains.base import Task
from curriculum.frontier import drift, frontier_labels, refresh
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing import retrain
from curriculum.store import lineage, repo, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import ProbeEnsembleRow, ProbeRow, SolverTrial
from daemon.loop.ports import DispatchError, Engine, Retrainer, SpotChecker
from daemon.loop.state import Champion, DriverState
from probes.band import Band

log = logging.getLogger("propel.frontier")


@dataclass(frozen=True)
class FrontierSettings:
    staleness: StalenessPolicy = field(default_factory=StalenessPolicy)
    drift_budget_share: float = 0.25
    drift_per_stratum: int = 8
    drift_max_cycles: int = 10  # a measurement closes after this many cycles even if some tasks never got a verdict
    refresh_drift_threshold: float = 0.3
    refresh_every_labels: int = 0
    refresh_every_trainer_labels: int = 128  # following a trainer's solver (daemon.loop.follow)
    refresh_trainer_label_window: int = 0  # following a trainer's solver: its newest labels a refresh uses (0: all)
    refresh_recent_labels: int = 0  # in effect: a refresh uses only the newest N usable labels (0: all)
    trainer_band_lead: int | str = frontier_labels.AUTO_LEAD  # following a trainer's solver: its refreshes aim this
    #   many solves below the band, or "auto" (the default: 1 while more of its newest acks lie above it than below)
    band_lead: int | str = 0  # in effect: a refresh's band, lowered by this many solves (Band.lowered), or "auto"
    refresh_holdout_share: float = 0.25
    refresh_min_labels: int = 32


def drift_share(budget: int, share: float, remaining: int) -> int:
    """Re-measurements this cycle: ``share`` of the budget (at least one while any budget and share
    are left), never more than the tasks still to measure."""
    if budget <= 0 or share <= 0 or remaining <= 0:
        return 0
    return min(remaining, budget, max(1, round(budget * share)))


class FrontierTracker:
    """``measured_by``: the label source that re-measures drift (``spotcheck``; ``consumer`` for a trainer's
    solver, whose own acks of the re-served tasks measure it)."""

    def __init__(self, store: Store, run_id: int, solver_name: str, settings: FrontierSettings, band: Band,
                 seed: int = 0, measured_by: str = "spotcheck") -> None:
        self.store, self.run_id, self.name, self.s, self.band, self.seed = (
            store, run_id, solver_name, settings, band, seed)
        self.measured_by = measured_by

    def current_version(self) -> str:
        with self.store.session() as s:
            cur = solver_versions.current(s, self.name)
        return cur.version if cur is not None else solver_versions.UNVERSIONED

    def serving_id(self) -> str:
        """The qualified id spot-checks are recorded under now (the current version's)."""
        return solver_versions.qualified_id(self.name, self.current_version())

    # ---- drift -----------------------------------------------------------------------------------
    def plan_drift(self, cycle: int, state: DriverState, budget: int) -> list[int]:
        """Task ids to re-measure on the current version this cycle (opens a measurement on a new version)."""
        cur = self.current_version()
        prev = state.solver_version
        state.solver_version = cur
        if prev is not None and prev != cur:
            self._open(cycle, prev, cur)
        with self.store.session() as s:
            open_ = [m for m in drift.measurements(s, self.run_id, self.name, "measuring") if m.new_version == cur]
            if not open_:
                return []
            sid = solver_versions.qualified_id(self.name, cur)
            tried = set(s.scalars(select(SolverTrial.task_id).where(
                SolverTrial.solver_id == sid, SolverTrial.task_id.in_(list(open_[0].sample)))))
        pending = set(state.spotcheck_pending)
        sample = open_[0].sample
        # formerly in-band tasks first: the drift score is theirs, and a measurement may be superseded
        # by the next announce before it finishes
        todo = sorted((t for t in sample if t not in tried and t not in pending),
                      key=lambda t: (sample[t] != "in_band", t))
        return todo[:drift_share(budget, self.s.drift_budget_share, len(todo))]

    def _open(self, cycle: int, old: str, new: str) -> None:
        with self.store.session() as s:
            weighted = frontier_labels.usable_labels(s, self.name, StalenessPolicy(keep_versions=10**6),
                                                     run_id=self.run_id)
            strata = drift.old_strata(weighted, self.band)
            sample = drift.stratified_sample(strata, self.s.drift_per_stratum, seed=self.seed * 7_919 + cycle)
            got = drift.open_measurement(s, self.run_id, self.name, old, new, cycle, sample)
        log.info("solver %s moved %s → %s: re-measuring %d labelled tasks (%s)", self.name, old or "(unversioned)",
                 new, len(got.sample), {k: list(got.sample.values()).count(k) for k in drift.STRATA})

    def observe_drift(self, cycle: int) -> dict[str, float]:
        """Fold new-version labels of the sampled tasks into each open measurement; the latest finished score.

        A measurement closes when its sample is labelled, after ``drift_max_cycles``, or as soon as a
        newer version is announced (superseded: spot-checks no longer go to its version, so it could
        only wait out the cycle limit; it closes with the transitions measured so far)."""
        out: dict[str, float] = {}
        cur = self.current_version()
        with self.store.session() as s:
            for m in drift.measurements(s, self.run_id, self.name, "measuring"):
                labels = [r for r in frontier_labels.label_records(s, self.name, run_id=self.run_id,
                                                                            task_ids=list(m.sample))
                          if r.solver_version == m.new_version]
                pairs = drift.measured_pairs(m.sample, labels, self.band)
                labelled = {r.task_id for r in labels if r.source == self.measured_by}
                done = (set(m.sample) <= labelled or cycle - m.cycle >= self.s.drift_max_cycles
                        or m.new_version != cur)
                m = drift.update_measurement(s, m.id, pairs, done)
                if m.state == "done":
                    log.info("drift of %s %s: %s over %d tasks, matrix %s", self.name, m.new_version,
                             "n/a" if m.score is None else f"{m.score:.2f}", m.measured, m.matrix)
            # only a finished measurement is a drift score: a partial one (a few tasks re-measured, formerly
            # in-band ones first) would fire the frontier_drift alert on a sample of one or two (#37)
            latest = [m for m in drift.measurements(s, self.run_id, self.name, "done") if m.score is not None]
        if latest:
            out["drift_score"] = float(latest[-1].score or 0.0)
            out["drift_measured"] = float(latest[-1].measured)
        return out

    @property
    def retry_after_labels(self) -> int:
        """New labels after which a refresh skipped for want of data is tried again."""
        return max(8, self.s.refresh_min_labels // 4)

    def refresh_due(self, state: DriverState) -> str | None:
        """Why a primary refresh is due now (None: not due): a finished measurement above the drift
        threshold that has not triggered one yet, a skipped refresh once enough labels arrived since
        (:attr:`retry_after_labels`), or enough new labels since the last refresh."""
        with self.store.session() as s:
            finished = [m for m in drift.measurements(s, self.run_id, self.name, "done") if m.score is not None]
            written = frontier_labels.labels_written(s, self.name, self.run_id)
        seen = set(state.refresh_drift_seen)
        for m in finished:
            if m.id not in seen and (m.score or 0.0) > self.s.refresh_drift_threshold:
                state.refresh_drift_seen = sorted(seen | {m.id})
                return f"drift {m.score:.2f} on {m.new_version}"
        if state.refresh_retry is not None and written - state.refresh_retry_labels_at >= self.retry_after_labels:
            return f"retry ({written - state.refresh_retry_labels_at} new labels since {state.refresh_retry})"
        base = state.refresh_labels_at
        if self.s.refresh_every_labels > 0 and written - base >= self.s.refresh_every_labels:
            return f"{written - base} new labels"
        return None


# ---- primary refresh (champion/challenger) ----------------------------------------------------------
class _Settings(Protocol):
    @property
    def run_name(self) -> str: ...
    @property
    def frontier(self) -> FrontierSettings: ...
    @property
    def retrain_timeout_s(self) -> float: ...
    @property
    def min_probability(self) -> float: ...


class Driver(Protocol):
    """What the refresh needs of :class:`daemon.loop.driver.Driver` (a protocol: no import cycle)."""

    store: Store
    run_id: int
    engine: Engine
    spot: SpotChecker
    retrainer: Retrainer
    clock: Callable[[], datetime]

    @property
    def s(self) -> _Settings: ...

    @property
    def frontier(self) -> FrontierTracker: ...

    def _retrain_spec(self, cycle: int, collapse_topic: bool) -> retrain.RetrainSpec: ...

    def _reload_probes(self) -> None: ...

    def _save(self, phase: str, cycle: int, state: DriverState, sess: Any = None) -> None: ...


def start_refresh(driver: Driver, cycle: int, state: DriverState) -> dict[str, float]:
    """Create and hand over a challenger job when a refresh is due and none is pending."""
    if state.refresh_job is not None:
        return {}
    why = driver.frontier.refresh_due(state)
    if why is None:
        return {}
    with driver.store.session() as s:
        champions = [p for p in repo.active_probes(s, driver.run_id) if p.role == "primary"]
        written = frontier_labels.labels_written(s, driver.frontier.name, driver.run_id)
        combine = s.scalars(select(ProbeEnsembleRow.combine).where(ProbeEnsembleRow.run_id == driver.run_id)
                            .order_by(ProbeEnsembleRow.id.desc()).limit(1)).first() or "min"
    state.refresh_labels_at = written
    state.refresh_retry = None
    # the challenger is an ensemble of as many members as the champion's (probes.members), combined alike
    base = driver._retrain_spec(cycle, False)
    lead, because = refresh_lead(driver)
    band = base.band.lowered(lead)  # a followed trainer's lead (0: the band itself)
    spec = replace(base, name=f"{driver.s.run_name}-primary-r{cycle}", role="primary",
                   band_lo=band.lo, band_hi=band.hi, band_lead=lead,
                   champion=champions[0].artifact_uri if champions else "",
                   champion_members=[p.artifact_uri for p in champions], members=max(1, len(champions)),
                   combine=combine,
                   holdout_share=driver.s.frontier.refresh_holdout_share,
                   refresh_min_labels=driver.s.frontier.refresh_min_labels,
                   recent_labels=driver.frontier.s.refresh_recent_labels)
    aimed = f" (aimed {band.lo}-{band.hi} solves: frontier.trainer_band_lead{because})" if band != base.band else ""
    kept = f" (the band itself: frontier.trainer_band_lead{because})" if because and band == base.band else ""
    log.info("primary-probe refresh %s: %s%s%s", spec.name, why, aimed, kept)
    retrain.create_job(driver.store, spec)
    state.refresh_job = spec.name
    state.refresh_undispatched = True
    driver._save("retrain", cycle, state)  # the job is recorded before it is handed over: a crash re-sends it
    try:
        driver.retrainer.submit(spec)
        state.refresh_undispatched = False
    except DispatchError as err:
        log.warning("%s", err)
    return {"refresh_started": 1.0, "refresh_band_lead": float(lead)} | collect_refresh(driver, state)


def refresh_lead(driver: Driver) -> tuple[int, str]:
    """The solves a refresh aims below the band, and why when ``"auto"`` chose it (else ``""``): for
    ``"auto"``, from the followed trainer's newest ``refresh_every_labels`` acks (at least 32)."""
    lead = driver.frontier.s.band_lead
    if lead != frontier_labels.AUTO_LEAD:
        return int(lead), ""
    with driver.store.session() as s:
        sides = frontier_labels.newest_ack_sides(s, driver.frontier.name, run_id=driver.run_id,
                                                 newest=max(32, driver.frontier.s.refresh_every_labels),
                                                 band=driver.frontier.band)
    return sides.lead, f" = auto: {sides}"


def collect_refresh(driver: Driver, state: DriverState) -> dict[str, float]:
    """Look at the pending challenger: promote it (and retire stale ready tasks) when it won."""
    job = retrain.settle_job(driver.store, state.refresh_job, driver.clock(), driver.s.retrain_timeout_s)
    if job is None:
        state.refresh_job = None
        return {}
    if job.state == "pending":
        if state.refresh_undispatched:
            try:
                driver.retrainer.submit(job.spec)
                state.refresh_undispatched = False
            except DispatchError as err:
                log.warning("%s", err)
        return {}
    state.refresh_job = None
    if job.state == "skipped":  # too few labels, or a holdout of one class: due again once more arrive
        with driver.store.session() as s:
            state.refresh_retry_labels_at = frontier_labels.labels_written(s, driver.frontier.name, driver.run_id)
        state.refresh_retry = f"{job.name} was skipped: {job.reason}"
        log.info("primary refresh %s skipped (%s); tried again after %d new labels", job.name, job.reason,
                 driver.frontier.retry_after_labels)
        return {"primary_refreshed": 0.0, "refresh_skipped": 1.0}
    if job.state != "done" or job.probe_id is None:
        log.info("primary refresh %s %s: %s", job.name, job.state, job.reason)
        return {"primary_refreshed": 0.0}
    out = {"primary_refreshed": float(bool(job.result.get("promote")))}
    for who in ("champion", "challenger"):
        score = job.result.get(who)
        if score:
            out[f"refresh_{who}_bacc"] = float(score["balanced_accuracy"])
    if not job.result.get("promote"):
        log.info("challenger %s kept out: %s%s", job.name, job.result.get("reason"), _sizes(job.result))
        return out
    now = driver.clock()
    with driver.store.session() as s:
        aux = [p.id for p in repo.active_probes(s, driver.run_id) if p.role == "aux"]
        members = [int(i) for i in job.result.get("member_probe_ids") or [job.probe_id]]
        repo.set_active_probes(s, [*members, *aux], driver.run_id)  # the whole challenger ensemble leads
        for row in s.scalars(select(ProbeRow).where(ProbeRow.id.in_(members))):  # when (the operator view)
            row.meta = {**dict(row.meta), "promoted_at": now.isoformat(timespec="seconds"),
                        "promoted_cycle": job.spec.cycle}
    driver._reload_probes()
    state.champion = Champion(probe=job.name, cycle=job.spec.cycle, at=now)
    state.totals.primary_refreshes += 1
    retired = retire_ready(driver)
    state.totals.stale_retired += retired
    out["stale_retired"] = float(retired)
    log.info("challenger %s promoted (%s%s); %d ready tasks retired as stale", job.name, job.result.get("reason"),
             _sizes(job.result), int(out["stale_retired"]))
    return out


def _sizes(result: dict[str, Any]) -> str:
    """How many labels a refresh judged on: a verdict on 8 held-out labels is not one on 800."""
    if "train_rows" not in result:
        return ""
    return f"; trained on {result['train_rows']:,} labels, judged on {result['holdout_rows']:,} held out"


def retire_ready(driver: Driver) -> int:
    """Re-score the run's ready tasks with the new primary: those below the emission threshold go stale —
    except those the current solver version's spot-check verified in band (emission trusts that verdict
    over any score) — the others carry the new probability (lease selection by ``predicted_in_band`` sees it)."""
    rows = refresh.ready_tasks(driver.store, driver.run_id)
    if not rows:
        return 0
    dom = driver.engine.domain
    scored = driver.engine.score([dom.reference_text(Task(d, text, payload)) for _, d, text, payload in rows])
    with driver.store.session() as s:  # the new ensemble's scores become the tasks' current ones (lineage)
        ensemble = lineage.record_ensemble(s, driver.run_id, scored.ensemble)
        lineage.record_probe_scores(s, ensemble, [(t, lg, p) for (t, *_), lg, p in
                                                  zip(rows, scored.logits, scored.probabilities, strict=True)])
    probs = {t: p for (t, *_), p in zip(rows, scored.probabilities, strict=True)}
    verified = refresh.verified_in_band(driver.store, driver.run_id, driver.frontier.serving_id(), list(probs))
    return refresh.rescore_ready(driver.store, driver.run_id, probs, driver.s.min_probability, verified)
