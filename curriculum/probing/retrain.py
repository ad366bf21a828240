"""Aux-probe retraining as a store-bound job: the same function runs in the leader (embedded mode)
and in a Celery ``retrain`` worker (distributed mode).

The leader writes a ``pending`` :class:`~curriculum.store.models.RetrainJob` row with a
:class:`RetrainSpec`, then either calls :func:`run_retrain` itself or sends the spec to the run's
``retrain`` queue. :func:`run_retrain` loads every spot-check label of the run and the false positives
the leader recorded in the ``false_positives`` table (the negatives; the leader marks them consumed
when it activates the probe), trains the aux probe with :func:`curriculum.probing.coevolution.train_aux_probe` on the
frozen reference, puts the artifact in the content-addressed artifact store, registers it **inactive** and
records the outcome on the job row. The leader activates a ``done`` probe (it owns the reward).

Idempotent: a redelivered message for a finished job returns the recorded outcome; the probe name is
unique, so a job killed between saving and recording re-registers the same row.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from curriculum.domains.base import Domain, Task
from curriculum.frontier import frontier_labels, refresh
from curriculum.frontier.staleness import StalenessPolicy, freshest_per_task
from curriculum.labelling.spotcheck import LabelValue
from curriculum.probing.coevolution import InsufficientAuxData, LabelledSample, dominant_topic, train_aux_probe
from curriculum.store import lineage, repo
from curriculum.store.artifacts import ArtifactStore
from curriculum.store.db import Store, insert_ignore
from curriculum.store.models import Label, ProbeScore, RetrainJob, TaskRow
from probes import FeatureExtractor, FeatureSpec, TrainConfig, save_probe
from probes.band import Band

log = logging.getLogger("propel.retrain")


_RETIRED_SPEC_KEYS = ("artifact_dir",)  # jobs written before the artifact store (probes now go to the store)


@dataclass(frozen=True)
class RetrainSpec:
    """What one retrain needs besides the store and the domain (JSON-safe: it is the Celery message)."""

    run_id: int
    name: str
    cycle: int
    reference: str  # hub id, or the content address of a local reference model (fetched from the artifact store)
    reference_fingerprint: str  # the worker refuses a reference whose weights differ
    layer: int
    pooling: str
    k: int
    band_lo: int
    band_hi: int
    min_valid_trials: int
    threshold: float
    arch: str
    collapse_topic: bool  # also use the dominant topic family as negatives (collapse mitigation)
    seed: int = 0
    solver: str = ""  # the solver name whose labels train the probe ("" : every spot-check label, no versions)
    staleness: dict[str, Any] = field(default_factory=dict)  # StalenessPolicy fields; {} = the default policy
    role: str = "aux"  # "primary": a champion/challenger refresh of the primary probe (curriculum.frontier.refresh)
    champion: str = ""  # primary refresh: the champion's artifact (member 0)
    champion_members: list[str] = field(default_factory=list)  # primary refresh: every champion member's artifact
    members: int = 1  # primary refresh: challenger ensemble size (probes.members)
    combine: str = "min"  # primary refresh: how members combine (probes.ensemble), for both ensembles
    holdout_share: float = 0.25  # primary refresh: newest labels held out to judge challenger vs champion
    refresh_min_labels: int = 32  # primary refresh: usable labels needed
    recent_labels: int = 0  # primary refresh: only the newest N usable labels train and judge (0: all)
    band_lead: int = 0  # primary refresh: band_lo/band_hi were lowered by this many solves (labels relabelled)

    @property
    def band(self) -> Band:
        return Band(self.k, self.band_lo, self.band_hi, self.min_valid_trials)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetrainSpec:
        data = {k: v for k, v in data.items() if k not in _RETIRED_SPEC_KEYS}
        unknown = set(data) - {f.name for f in fields(cls)}
        missing = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING} - set(data)
        if unknown or missing:
            raise ValueError(f"bad retrain spec: unknown {sorted(unknown)}, missing {sorted(missing)}")
        return cls(**data)


@dataclass(frozen=True)
class RetrainOutcome:
    """A job's state; ``false_positive_ids`` are the mined negatives of a ``done`` job."""

    name: str
    state: str
    spec: RetrainSpec
    created_at: datetime
    probe_id: int | None = None
    reason: str | None = None
    false_positive_ids: tuple[int, ...] = ()
    result: dict[str, Any] = field(default_factory=dict)  # the job's recorded result (a refresh's decision)


def create_job(store: Store, spec: RetrainSpec) -> bool:
    """Record a pending job (idempotent on ``spec.name``); True when it is new."""
    with store.session() as s:
        return insert_ignore(s, RetrainJob, [{
            "run_id": spec.run_id, "name": spec.name, "cycle": spec.cycle, "state": "pending",
            "spec": spec.to_json(), "result": {}, "created_at": datetime.now(UTC)}], ["name"]) == 1


def job_outcome(store: Store, name: str) -> RetrainOutcome | None:
    with store.session() as s:
        row = s.scalars(select(RetrainJob).where(RetrainJob.name == name)).first()
        if row is None:
            return None
        return RetrainOutcome(row.name, row.state, RetrainSpec.from_json(dict(row.spec)), row.created_at,
                              row.probe_id, row.reason, tuple(row.result.get("false_positive_ids", [])),
                              dict(row.result))


def finish_job(store: Store, name: str, state: str, reason: str | None = None) -> None:
    """Record a ``skipped`` or ``failed`` outcome (a ``done`` one is written by :func:`run_retrain`)."""
    with store.session() as s:
        s.execute(update(RetrainJob).where(RetrainJob.name == name, RetrainJob.state == "pending")
                  .values(state=state, reason=reason, finished_at=datetime.now(UTC)))


def settle_job(store: Store, name: str | None, now: datetime, timeout_s: float) -> RetrainOutcome | None:
    """The job's outcome (None: no job by that name); a job still pending ``timeout_s`` after it was
    created is recorded ``failed`` first ("no outcome after … s"), so a lost worker never blocks its caller."""
    job = job_outcome(store, name) if name else None
    if job is not None and job.state == "pending":
        age = (now - job.created_at).total_seconds()
        if age > timeout_s:
            finish_job(store, job.name, "failed", f"no outcome after {age:.0f} s")
            return job_outcome(store, job.name)
    return job


def reject_job(store: Store, name: str, reason: str) -> None:
    """Mark a ``done`` job ``failed`` (its probe could not be activated: e.g. not in the leader's store)."""
    with store.session() as s:
        s.execute(update(RetrainJob).where(RetrainJob.name == name, RetrainJob.state == "done")
                  .values(state="failed", reason=reason))


def load_samples(store: Store, run_id: int, domain: Domain, solver: str = "",
                 staleness: StalenessPolicy | None = None) -> list[LabelledSample]:
    """Every usable labelled valid task of the run, as reference text + its current ensemble probability.

    With ``solver``: spot-check *and* trainer labels of that solver name that still count under
    ``staleness`` (:mod:`curriculum.frontier.staleness`), the freshest one per task. Without: every spot-check
    label (runs that predate solver versions). All of them, not only the newest: the new aux probe
    replaces the previous one, so it must keep refusing what the earlier ones refused.
    """
    with store.session() as s:
        if solver:
            best = freshest_per_task(frontier_labels.usable_labels(s, solver, staleness or StalenessPolicy(),
                                                                   run_id=run_id))
            labels = {t: LabelValue(w.label.solved, w.label.valid_trials, w.label.in_band) for t, w in best.items()
                      if w.label.in_band is not None}
        else:
            labels = {int(r.task_id): LabelValue(r.solved, r.valid_trials, r.in_band) for r in s.execute(
                select(Label.task_id, Label.solved, Label.valid_trials, Label.in_band)
                .join(TaskRow, TaskRow.id == Label.task_id)
                .where(Label.run_id == run_id, TaskRow.valid, Label.source == "spotcheck",
                       Label.in_band.is_not(None)))}
        rows = s.execute(
            select(TaskRow.id, TaskRow.text, TaskRow.payload, TaskRow.topic, ProbeScore.probability)
            .select_from(TaskRow)
            .join(ProbeScore, lineage.latest_score_of(TaskRow.id), isouter=True)
            .where(TaskRow.id.in_(list(labels)))).all() if labels else []
    return [LabelledSample(r.id, domain.reference_text(Task(domain.name, r.text, dict(r.payload or {}))), True,
                           float(r.probability or 0.0), labels[r.id], r.topic)
            for r in sorted(rows, key=lambda r: r.id)]


def run_retrain(store: Store, spec: RetrainSpec, domain: Domain, extractor: FeatureExtractor,
                artifacts: ArtifactStore) -> RetrainOutcome:
    """Carry out the job ``spec.name`` (created first if missing); returns its recorded outcome.

    The probe goes to ``artifacts`` and is registered under its content address, so the leader
    fetches (and verifies) it from the store, whatever machine trained it."""
    create_job(store, spec)
    known = job_outcome(store, spec.name)
    if known is not None and known.state != "pending":
        return known  # a redelivered message: the job already finished
    if extractor.reference.fingerprint != spec.reference_fingerprint:
        finish_job(store, spec.name, "failed", f"reference {spec.reference} has fingerprint "
                   f"{extractor.reference.fingerprint[:19]}…, the job expects {spec.reference_fingerprint[:19]}…")
        return _outcome(store, spec.name)
    if spec.role == "primary":
        return _run_primary_refresh(store, spec, domain, extractor, artifacts)
    samples = load_samples(store, spec.run_id, domain, spec.solver, StalenessPolicy(**spec.staleness))
    with store.session() as s:  # the false positives the leader recorded, consumed ones too (see load_samples)
        recorded = lineage.false_positive_tasks(s, spec.run_id)
    topic = dominant_topic(samples)[0] if spec.collapse_topic else None
    try:
        result = train_aux_probe(samples, extractor, FeatureSpec(layer=spec.layer, pooling=spec.pooling), spec.band,
                                 threshold=spec.threshold, collapse_topic=topic, arch=spec.arch,
                                 config=TrainConfig(seed=spec.seed), name=spec.name, false_positive_ids=recorded)
    except InsufficientAuxData as err:
        finish_job(store, spec.name, "skipped", str(err))
        return _outcome(store, spec.name)
    with tempfile.TemporaryDirectory(prefix="propel-probe-") as tmp:
        uri = artifacts.put_tree(save_probe(result.probe, Path(tmp) / spec.name))
    fp_ids = result.dataset.false_positive_ids
    with store.session() as s:
        pid = repo.register_probe(s, spec.name, "aux", uri, spec.reference_fingerprint,
                                  {"metrics": result.metrics, "training": result.dataset.summary, "cycle": spec.cycle},
                                  run_id=spec.run_id)
        s.execute(update(RetrainJob).where(RetrainJob.name == spec.name, RetrainJob.state == "pending").values(
            state="done", probe_id=pid, finished_at=datetime.now(UTC),
            result={"false_positive_ids": fp_ids, "collapse_topic": topic, **result.dataset.summary}))
    return _outcome(store, spec.name)


def _run_primary_refresh(store: Store, spec: RetrainSpec, domain: Domain, extractor: FeatureExtractor,
                         artifacts: ArtifactStore) -> RetrainOutcome:
    try:
        result = refresh.run_refresh(store, spec, domain, extractor, artifacts)
    except refresh.InsufficientRefreshData as err:
        finish_job(store, spec.name, "skipped", str(err))
        return _outcome(store, spec.name)
    refresh.record_refresh(store, spec, result, spec.reference_fingerprint, artifacts)
    return _outcome(store, spec.name)


def carry_out(store: Store, spec: RetrainSpec, domain: Domain, extractor: Callable[[str], FeatureExtractor],
              artifacts: Callable[[], ArtifactStore]) -> RetrainOutcome:
    """:func:`run_retrain` with any error recorded on the job (``failed`` + the error) instead of raised.

    ``extractor(spec.reference)`` gives the feature extractor (a worker loads the reference here, so
    a reference that cannot load is a recorded failure too); ``artifacts()`` the artifact store (an
    unusable ``artifacts.url`` is a recorded failure as well). The leader moves on at its next retrain
    phase instead of waiting for the timeout.
    """
    try:
        return run_retrain(store, spec, domain, extractor(spec.reference), artifacts())
    except Exception as err:
        log.exception("retrain %s failed", spec.name)
        create_job(store, spec)
        finish_job(store, spec.name, "failed", f"{type(err).__name__}: {err}")
        return _outcome(store, spec.name)


def _outcome(store: Store, name: str) -> RetrainOutcome:
    out = job_outcome(store, name)
    assert out is not None, f"retrain job {name} vanished"
    return out
