"""Primary-probe refresh, champion/challenger.

When the solver drifted (or enough new labels came in) the leader asks for a *challenger* primary
probe, as a store-recorded job on the retrain queue (a :class:`~curriculum.probing.retrain.RetrainSpec` with
``role = "primary"``: same idempotence as aux retrains — a redelivered message returns the recorded
outcome, the probe name is unique). The job:

1. loads the usable labels of the solver (spot-check and trainer labels, staleness applied, the
   freshest per task) and holds out the *most recent* ``holdout_share`` of them;
2. trains a challenger on the rest with the champion's feature spec on the same frozen reference;
3. scores champion and challenger on the held-out labels and applies :func:`decide`: the challenger
   wins only with a higher balanced accuracy and an ECE no worse (within ``ece_tolerance``);
4. registers the challenger (inactive) and records the decision and both scores on the job row.

The leader activates a promoted challenger in place of the champion between RL chunks (as it does
aux probes) and retires ready queue tasks the new probe no longer rates as frontier.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
from sqlalchemy import Table, bindparam, select, update

from curriculum.domains.base import Domain, Task
from curriculum.frontier import frontier_labels
from curriculum.frontier.staleness import StalenessPolicy, freshest_per_task
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactStore
from curriculum.store.db import Store
from curriculum.store.models import QueueItem, RetrainJob, TaskRow
from probes import FeatureExtractor, FeatureSpec, TrainConfig, evaluate, load_probe, save_probe
from probes.band import Band
from probes.fit import fit_probe


@dataclass(frozen=True)
class HoldoutScore:
    """A probe on the held-out labels."""

    balanced_accuracy: float
    ece: float
    n: int


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str


def decide(champion: HoldoutScore | None, challenger: HoldoutScore | None, *, min_gain: float = 0.0,
           ece_tolerance: float = 0.0, min_holdout: int = 8) -> Verdict:
    """Promote the challenger only if it beats the champion on balanced accuracy (by more than
    ``min_gain``) without a worse ECE (beyond ``ece_tolerance``), on at least ``min_holdout`` labels.
    A champion that could not be scored (artifact gone, other feature) loses to any scored challenger."""
    if challenger is None:
        return Verdict(False, "no challenger score")
    if challenger.n < min_holdout:
        return Verdict(False, f"holdout of {challenger.n} labels < {min_holdout}")
    if champion is None:
        return Verdict(True, "champion could not be scored")
    if challenger.balanced_accuracy <= champion.balanced_accuracy + min_gain:
        return Verdict(False, f"balanced accuracy {challenger.balanced_accuracy:.3f} does not beat "
                              f"{champion.balanced_accuracy:.3f}")
    if challenger.ece > champion.ece + ece_tolerance:
        return Verdict(False, f"ECE {challenger.ece:.3f} worse than {champion.ece:.3f}")
    return Verdict(True, f"balanced accuracy {champion.balanced_accuracy:.3f} → {challenger.balanced_accuracy:.3f}, "
                         f"ECE {champion.ece:.3f} → {challenger.ece:.3f}")


def split_recent(order: list[int], share: float) -> tuple[list[int], list[int]]:
    """(train, holdout) of ``order`` (oldest first): the most recent ``share`` is held out."""
    n_hold = round(len(order) * share)
    n_hold = min(max(n_hold, 1 if order else 0), max(0, len(order) - 1))
    return order[:len(order) - n_hold], order[len(order) - n_hold:]


def _score(probe_probs: np.ndarray, y: np.ndarray) -> HoldoutScore | None:
    if len(set(y.tolist())) < 2:
        return None
    m = evaluate(y, probe_probs)
    return HoldoutScore(float(m.balanced_accuracy), float(m.ece), int(m.n))


@dataclass(frozen=True)
class RefreshData:
    task_ids: list[int]  # oldest label first
    texts: list[str]
    labels: np.ndarray


def load_refresh_data(store: Store, run_id: int, solver: str, policy: StalenessPolicy, domain: Domain
                      ) -> RefreshData:
    """Usable labels of ``solver`` (freshest per task, with a verdict), oldest label first."""
    with store.session() as s:
        best = freshest_per_task(frontier_labels.usable_labels(s, solver, policy, run_id=run_id))
        keep = {t: w for t, w in best.items() if w.label.in_band is not None}
        rows = {r.id: r for r in s.execute(select(TaskRow.id, TaskRow.text, TaskRow.payload).where(
            TaskRow.id.in_(list(keep))))} if keep else {}
    order = sorted(keep, key=lambda t: (keep[t].label.at or datetime.min.replace(tzinfo=UTC), t))
    texts = [domain.reference_text(Task(domain.name, rows[t].text, dict(rows[t].payload or {}))) for t in order]
    return RefreshData(order, texts, np.array([int(bool(keep[t].label.in_band)) for t in order], dtype=int))


def run_refresh(store: Store, spec: Any, domain: Domain, extractor: FeatureExtractor,
                artifacts: ArtifactStore) -> dict[str, Any]:
    """Train and judge a challenger for ``spec`` (a primary-role RetrainSpec); returns the job result.

    The champion is loaded from ``artifacts`` (its registry address); the challenger is saved there
    and ``result["artifact"]`` is its ``cas://sha256/…`` address.

    Raises :class:`InsufficientRefreshData` when the labels cannot train or judge a challenger.
    """
    policy = StalenessPolicy(**spec.staleness)
    data = load_refresh_data(store, spec.run_id, spec.solver, policy, domain)
    if len(data.task_ids) < spec.refresh_min_labels:
        raise InsufficientRefreshData(f"{len(data.task_ids)} usable labels < {spec.refresh_min_labels}")
    feature = FeatureSpec(layer=spec.layer, pooling=spec.pooling)
    x = extractor.extract(data.texts, [feature])[feature]
    idx = list(range(len(data.task_ids)))
    train, hold = split_recent(idx, spec.holdout_share)
    if len(set(data.labels[train].tolist())) < 2:
        raise InsufficientRefreshData("the training labels lack a class (need in-band and out-of-band tasks)")
    challenger = fit_probe(x[train], data.labels[train], reference=extractor.reference, spec=feature,
                           band=Band(spec.k, spec.band_lo, spec.band_hi, spec.min_valid_trials), arch=spec.arch,
                           config=TrainConfig(seed=spec.seed), name=spec.name,
                           training={"rows": len(train), "positives": int(data.labels[train].sum()),
                                     "solver": spec.solver, "staleness": spec.staleness})
    y_hold = data.labels[hold]
    if len(set(y_hold.tolist())) < 2:
        raise InsufficientRefreshData(f"the {len(hold)} most recent labels (the holdout) are all "
                                      f"{'in' if y_hold.all() else 'out of'} band: nothing to judge a challenger on")
    ch_score = _score(challenger.head.probabilities(x[hold]), y_hold)
    champ_score = _champion_score(spec.champion, artifacts, extractor, data.texts, hold, y_hold)
    verdict = decide(champ_score, ch_score, min_holdout=max(2, min(8, len(hold))))
    challenger.metrics.update({"holdout": None if ch_score is None else ch_score.__dict__})
    with tempfile.TemporaryDirectory(prefix="propel-probe-") as tmp:
        uri = artifacts.put_tree(save_probe(challenger, Path(tmp) / spec.name))
    return {"artifact": uri, "promote": verdict.promote, "reason": verdict.reason,
            "challenger": None if ch_score is None else ch_score.__dict__,
            "champion": None if champ_score is None else champ_score.__dict__,
            "champion_uri": spec.champion, "train_rows": len(train), "holdout_rows": len(hold)}


def _champion_score(uri: str, artifacts: ArtifactStore, extractor: FeatureExtractor, texts: list[str],
                    hold: list[int], y: np.ndarray) -> HoldoutScore | None:
    try:
        champ = load_probe(artifacts.local_path(uri), expected_fingerprint=extractor.reference.fingerprint)
    except Exception:  # artifact gone or from another reference: the challenger is judged alone
        return None
    x = extractor.extract([texts[i] for i in hold], [champ.spec])
    return _score(champ.probabilities(x), y)


class InsufficientRefreshData(ValueError):
    """Too few usable labels, or one class only: no challenger this time (the job is ``skipped``)."""


def ready_tasks(store: Store, run_id: int, limit: int = 100_000) -> list[tuple[int, str, str, dict[str, Any]]]:
    """(task id, domain, text, payload) of the run's ``ready`` queue rows (to re-score after a refresh)."""
    with store.session() as s:
        rows = s.execute(select(TaskRow.id, TaskRow.domain, TaskRow.text, TaskRow.payload)
                         .join(QueueItem, QueueItem.task_id == TaskRow.id)
                         .where(QueueItem.run_id == run_id, QueueItem.state == "ready")
                         .order_by(TaskRow.id).limit(limit)).all()
    return [(int(r.id), r.domain, r.text, dict(r.payload or {})) for r in rows]


def rescore_ready(store: Store, run_id: int, probabilities: dict[int, float], threshold: float) -> int:
    """Apply a new primary's in-band probabilities to ``run_id``'s ``ready`` rows: a row below
    ``threshold`` moves to ``stale`` (never served, kept for analysis); every other one gets the new
    value as its ``predicted_in_band``, the column a trainer's lease selects a range on (the message
    keeps the value at emission: its provenance). Only rows still ``ready`` change (a row leased
    meanwhile is left alone), only ``run_id``'s (another run may have queued the same task).
    Returns the rows retired."""
    stale = [t for t, p in probabilities.items() if p < threshold]
    kept = [{"b_task": t, "b_p": float(p)} for t, p in probabilities.items() if p >= threshold]
    open_row = (QueueItem.run_id == run_id, QueueItem.state == "ready")
    moved = 0
    with store.session() as s:
        for i in range(0, len(stale), 500):
            chunk = stale[i:i + 500]
            moved += len(s.execute(update(QueueItem).where(*open_row, QueueItem.task_id.in_(chunk))
                                   .values(state="stale").returning(QueueItem.id)
                                   .execution_options(synchronize_session=False)).all())
        if kept:  # one executemany: a bound parameter per row
            table = cast(Table, QueueItem.__table__)
            s.connection().execute(update(table).where(
                table.c.run_id == run_id, table.c.state == "ready",
                table.c.task_id == bindparam("b_task")).values(predicted_in_band=bindparam("b_p")), kept)
    return moved


def record_refresh(store: Store, spec: Any, result: dict[str, Any], reference_fingerprint: str,
                   artifacts: ArtifactStore | None = None) -> int:
    """Register the challenger (inactive, role primary) under its artifact address and write the job's
    ``done`` outcome. ``artifacts`` (optional) checks that the address is in the store first."""
    if artifacts is not None and not artifacts.has_tree(result["artifact"]):
        raise ValueError(f"challenger {result['artifact']} is not in {artifacts.location}")
    with store.session() as s:
        pid = repo.register_probe(s, spec.name, "primary", result["artifact"], reference_fingerprint,
                                  {"refresh": {k: v for k, v in result.items() if k != "artifact"},
                                   "cycle": spec.cycle}, run_id=spec.run_id)
        s.execute(update(RetrainJob).where(RetrainJob.name == spec.name, RetrainJob.state == "pending").values(
            state="done", probe_id=pid, finished_at=datetime.now(UTC), result=result))
    return pid
