"""Primary-probe refresh, champion/challenger.

When the solver drifted (or enough new labels came in) the leader asks for a *challenger* primary
probe, as a store-recorded job on the retrain queue (a :class:`~curriculum.probing.retrain.RetrainSpec` with
``role = "primary"``: same idempotence as aux retrains — a redelivered message returns the recorded
outcome, the probe name is unique). The job:

1. loads the usable labels of the solver (spot-check and trainer labels, staleness applied, the
   freshest per task; a followed trainer's newest ``recent_labels`` only) and holds out the *most recent*
   ``holdout_share`` of them;
2. trains a challenger on the rest with the champion's feature spec on the same frozen reference;
3. scores champion and challenger on the held-out labels and applies :func:`decide`: the challenger
   wins only with a higher balanced accuracy and an ECE no worse (within ``ece_tolerance``; a champion at
   chance has no ECE to defend), or when the champion learned another solver's labels or aims at another band
   (:func:`foreign_champion`);
4. registers the challenger (inactive) and records the decision and both scores on the job row.

The leader activates a promoted challenger in place of the champion between RL chunks (as it does
aux probes) and retires ready queue tasks the new probe no longer rates as frontier.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
from sqlalchemy import Table, bindparam, select, update

from curriculum.domains.base import Domain, Task
from curriculum.frontier import frontier_labels
from curriculum.frontier.staleness import LabelRecord, StalenessPolicy, freshest_per_task
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactStore
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, RetrainJob, TaskRow
from probes import FeatureExtractor, FeatureSpec, Probe, ProbeEnsemble, TrainConfig, evaluate, load_probe, save_probe
from probes.band import Band, Side
from probes.fit import fit_probe

#: balanced accuracy of a probe that ranks no better than a coin (or predicts one class for every task)
CHANCE = 0.5


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
           ece_tolerance: float = 0.0, min_holdout: int = 8, foreign: str | None = None) -> Verdict:
    """Promote the challenger only if it beats the champion on balanced accuracy (by more than
    ``min_gain``) without a worse ECE (beyond ``ece_tolerance``), on at least ``min_holdout`` labels.
    A champion that could not be scored (artifact gone, other feature) loses to any scored challenger,
    and so does a ``foreign`` one (the line that says so): a champion trained on another solver's labels
    does not guard this solver's frontier. On a few hundred labels of a moving solver both sides' balanced
    accuracy is noise (0.31–0.40 against 0.37–0.40 in #36's LM scenario), and the tie went to the probe of
    the wrong solver for the first 100 trainer steps. The ECE does not guard a champion at chance
    (balanced accuracy ≤ :data:`CHANCE`): one that predicts the base rate for every task is calibrated by
    construction and ranks nothing; in the closed loop (#35) such a champion (0.500, ECE 0.027) kept out
    challengers at 0.578 and 0.594 for 380 cycles while emission dried up."""
    if challenger is None:
        return Verdict(False, "no challenger score")
    if challenger.n < min_holdout:
        return Verdict(False, f"holdout of {challenger.n} labels < {min_holdout}")
    if champion is None:
        return Verdict(True, "champion could not be scored")
    if foreign:
        return Verdict(True, f"{foreign} (balanced accuracy {champion.balanced_accuracy:.3f} → "
                             f"{challenger.balanced_accuracy:.3f})")
    if challenger.balanced_accuracy <= champion.balanced_accuracy + min_gain:
        return Verdict(False, f"balanced accuracy {challenger.balanced_accuracy:.3f} does not beat "
                              f"{champion.balanced_accuracy:.3f}")
    if champion.balanced_accuracy <= CHANCE and challenger.ece > champion.ece + ece_tolerance:
        return Verdict(True, f"the champion ranks at chance (balanced accuracy {champion.balanced_accuracy:.3f} → "
                             f"{challenger.balanced_accuracy:.3f}); its ECE {champion.ece:.3f} guards nothing "
                             f"(challenger {challenger.ece:.3f})")
    if challenger.ece > champion.ece + ece_tolerance:
        return Verdict(False, f"ECE {challenger.ece:.3f} worse than {champion.ece:.3f}")
    return Verdict(True, f"balanced accuracy {champion.balanced_accuracy:.3f} → {challenger.balanced_accuracy:.3f}, "
                         f"ECE {champion.ece:.3f} → {challenger.ece:.3f}")


def split_recent(order: list[int], share: float, exclude: frozenset[int] = frozenset()) -> tuple[list[int], list[int]]:
    """(train, holdout) of ``order`` (oldest first): the most recent ``share`` of ``order`` is held out,
    skipping ``exclude`` (tasks the champion trained on: judging it on them would flatter it), which
    stay in the training part; the holdout shrinks when too few others are left."""
    n_hold = round(len(order) * share)
    n_hold = min(max(n_hold, 1 if order else 0), max(0, len(order) - 1))
    eligible = [t for t in order if t not in exclude]
    hold = eligible[len(eligible) - min(n_hold, len(eligible)):] if n_hold else []
    held = set(hold)
    return [t for t in order if t not in held], hold


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


def load_refresh_data(store: Store, run_id: int, solver: str, policy: StalenessPolicy, domain: Domain,
                      recent: int = 0, band: Band | None = None) -> RefreshData:
    """Usable labels of ``solver`` (freshest per task, with a verdict), oldest label first; with ``recent``,
    only the newest ``recent`` of them. The verdict is the stored one, or with ``band`` that band's verdict on
    the label's counts (a followed trainer's refresh aims at a lowered band: ``frontier.trainer_band_lead``)."""
    with store.session() as s:
        best = freshest_per_task(frontier_labels.usable_labels(s, solver, policy, run_id=run_id))
        verdict = {t: w.label.in_band if band is None else relabel(w.label, band) for t, w in best.items()}
        keep = {t: w for t, w in best.items() if verdict[t] is not None}
        rows = {r.id: r for r in s.execute(select(TaskRow.id, TaskRow.text, TaskRow.payload).where(
            TaskRow.id.in_(list(keep))))} if keep else {}
    order = sorted(keep, key=lambda t: (keep[t].label.at or datetime.min.replace(tzinfo=UTC), t))
    if recent > 0:
        order = order[-recent:]
    texts = [domain.reference_text(Task(domain.name, rows[t].text, dict(rows[t].payload or {}))) for t in order]
    return RefreshData(order, texts, np.array([int(bool(verdict[t])) for t in order], dtype=int))


def relabel(label: LabelRecord, band: Band) -> bool | None:
    """``label``'s verdict under another ``band``, from its counts. A spot-check label with fewer than k valid
    attempts may have stopped early, settled for the band it was checked against: it keeps a verdict only if no
    outcome of its remaining attempts could change it under ``band`` (:meth:`Band.settled`). A trainer's
    outcome is complete (its group ran every attempt)."""
    if label.source == "spotcheck" and label.valid_trials < band.k:
        side = band.settled(label.solved, label.valid_trials, label.valid_trials)
        return None if side in (None, Side.INSUFFICIENT) else side is Side.IN_BAND
    return band.in_band(label.solved, label.valid_trials)


def run_refresh(store: Store, spec: Any, domain: Domain, extractor: FeatureExtractor,
                artifacts: ArtifactStore) -> dict[str, Any]:
    """Train and judge a challenger ensemble for ``spec`` (a primary-role RetrainSpec); returns the job result.

    The champion ensemble (every primary member, ``spec.champion_members``) is loaded from ``artifacts``;
    the holdout leaves out every task one of its members trained on (their ``training["task_ids"]``).
    The challenger is ``spec.members`` probes (seeds ``spec.seed + m``) trained on the rest; both
    ensembles are combined by ``spec.combine`` and scored on the holdout. Each challenger member is saved
    to ``artifacts``: ``result["artifacts"]`` lists their ``cas://sha256/…`` addresses (member 0 first,
    also ``result["artifact"]``).

    Raises :class:`InsufficientRefreshData` when the labels cannot train or judge a challenger.
    """
    policy = StalenessPolicy(**spec.staleness)
    data = load_refresh_data(store, spec.run_id, spec.solver, policy, domain, spec.recent_labels,
                             spec.band if spec.band_lead else None)  # no lead: the stored verdicts
    if len(data.task_ids) < spec.refresh_min_labels:
        raise InsufficientRefreshData(f"{len(data.task_ids)} usable labels < {spec.refresh_min_labels}")
    feature = FeatureSpec(layer=spec.layer, pooling=spec.pooling)
    x = extractor.extract(data.texts, [feature])[feature]
    champions = _load_champions(champion_uris(spec), artifacts, extractor)
    trained = {t for p in champions or () for t in p.training.get("task_ids", ())}
    train, hold = split_recent(list(range(len(data.task_ids))), spec.holdout_share,
                               frozenset(i for i, t in enumerate(data.task_ids) if t in trained))
    if len(set(data.labels[train].tolist())) < 2:
        raise InsufficientRefreshData("the training labels lack a class (need in-band and out-of-band tasks)")
    y_hold = data.labels[hold]
    if len(set(y_hold.tolist())) < 2:
        what = "empty" if not hold else "all in band" if y_hold.all() else "all out of band"
        raise InsufficientRefreshData(f"the holdout ({len(hold)} most recent labels of tasks the champion did not "
                                      f"train on) is {what}: nothing to judge a challenger on")
    challengers = [fit_probe(x[train], data.labels[train], reference=extractor.reference, spec=feature,
                             band=spec.band, arch=spec.arch,
                             config=TrainConfig(seed=spec.seed + m), name=member_name(spec.name, m),
                             training={"rows": len(train), "positives": int(data.labels[train].sum()),
                                       "solver": spec.solver, "staleness": spec.staleness,
                                       "task_ids": [data.task_ids[i] for i in train]})
                   for m in range(max(1, spec.members))]
    ch_score = _score(ProbeEnsemble(challengers, spec.combine).probabilities({feature: x[hold]}), y_hold)
    champ_score = None if champions is None else _ensemble_score(
        ProbeEnsemble(champions, spec.combine), extractor, [data.texts[i] for i in hold], y_hold)
    verdict = decide(champ_score, ch_score, min_holdout=max(2, min(8, len(hold))),
                     foreign=foreign_champion(champions or (), spec.solver, spec.band))
    uris = []
    with tempfile.TemporaryDirectory(prefix="propel-probe-") as tmp:
        for probe in challengers:
            probe.metrics.update({"holdout": None if ch_score is None else ch_score.__dict__})
            uris.append(artifacts.put_tree(save_probe(probe, Path(tmp) / probe.name)))
    return {"artifact": uris[0], "artifacts": uris, "promote": verdict.promote, "reason": verdict.reason,
            "challenger": None if ch_score is None else ch_score.__dict__,
            "champion": None if champ_score is None else champ_score.__dict__,
            "champion_uri": spec.champion, "champion_uris": champion_uris(spec), "members": len(challengers),
            "train_rows": len(train), "holdout_rows": len(hold),
            "holdout_excluded": sum(1 for t in data.task_ids if t in trained)}


def champion_uris(spec: Any) -> list[str]:
    """The champion ensemble's member artifacts (specs written before ensembles name one ``champion``)."""
    members = list(getattr(spec, "champion_members", None) or [])
    return members or ([spec.champion] if spec.champion else [])


def foreign_champion(champions: Sequence[Probe], solver: str, band: Band | None = None) -> str | None:
    """The line that says the champion learned another solver's labels than ``solver``'s, or aims at another
    band than ``band`` (None: it learned this solver's and aims here, or says nothing of whose: an artifact
    written before probes named their solver). A followed trainer's refresh aims at a band lowered by the
    lead it decided (``frontier.trainer_band_lead = "auto"`` changes it between refreshes): a champion aimed
    ahead must not keep emission there once the lead went back to 0, by a tie on a few hundred labels."""
    theirs = {str(p.training["solver"]) for p in champions if p.training.get("solver")}
    if solver and theirs and solver not in theirs:
        return f"the champion learned {', '.join(sorted(theirs))}'s labels, not {solver}'s"
    aims = {(int(p.k), *map(int, p.band)) for p in champions if getattr(p, "band", None) is not None}
    if band is None or not aims or (band.k, band.lo, band.hi) in aims:
        return None
    said = ", ".join(f"{lo}-{hi} of {k}" for k, lo, hi in sorted(aims))
    return f"the champion aims at {said} solves, this refresh at {band.lo}-{band.hi} of {band.k}"


def member_name(name: str, member: int) -> str:
    """The registry name of challenger member ``member`` of job ``name`` (member 0 keeps the job's name)."""
    return name if member == 0 else f"{name}-m{member}"


def _load_champions(uris: list[str], artifacts: ArtifactStore, extractor: FeatureExtractor) -> list[Probe] | None:
    """The champion's members; None when there is none or one cannot be loaded (the challenger is then
    judged alone, as :func:`decide` says)."""
    if not uris:
        return None
    try:
        return [load_probe(artifacts.local_path(u), expected_fingerprint=extractor.reference.fingerprint)
                for u in uris]
    except Exception:  # artifact gone or from another reference
        return None


def _ensemble_score(ensemble: ProbeEnsemble, extractor: FeatureExtractor, texts: list[str],
                    y: np.ndarray) -> HoldoutScore | None:
    return _score(ensemble.probabilities(extractor.extract(texts, ensemble.specs)), y)


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


def verified_in_band(store: Store, run_id: int, solver_id: str, task_ids: Sequence[int]) -> set[int]:
    """Those of ``task_ids`` that run ``run_id``'s spot-check of ``solver_id`` (the current version's
    qualified id) verified as in band: emission trusts that verdict over any probe score, and so does
    the retirement of stale tasks."""
    out: set[int] = set()
    with store.session() as s:
        for i in range(0, len(task_ids), 500):
            out |= set(s.scalars(select(Label.task_id).where(
                Label.run_id == run_id, Label.solver_id == solver_id, Label.source == "spotcheck",
                Label.in_band.is_(True), Label.task_id.in_(list(task_ids[i:i + 500])))))
    return out


def rescore_ready(store: Store, run_id: int, probabilities: dict[int, float], threshold: float,
                  verified: Collection[int] = frozenset()) -> int:
    """Apply a new primary's in-band probabilities to ``run_id``'s ``ready`` rows: a row below
    ``threshold`` moves to ``stale`` (never served, kept for analysis) unless it is in ``verified`` (the
    current solver version verified it in band: :func:`verified_in_band`); every other one gets the new
    value as its ``predicted_in_band``, the column a trainer's lease selects a range on (the message
    keeps the value at emission: its provenance). Only rows still ``ready`` change (a row leased
    meanwhile is left alone), only ``run_id``'s (another run may have queued the same task).
    Returns the rows retired."""
    stale = [t for t, p in probabilities.items() if p < threshold and t not in verified]
    gone = set(stale)
    kept = [{"b_task": t, "b_p": float(p)} for t, p in probabilities.items() if t not in gone]
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
    """Register the challenger's members (inactive, role primary) under their artifact addresses and write
    the job's ``done`` outcome (``probe_id``: member 0; ``result["member_probe_ids"]``: every member, what a
    promotion activates). ``artifacts`` (optional) checks that the addresses are in the store first."""
    uris = list(result.get("artifacts") or [result["artifact"]])
    for uri in uris:
        if artifacts is not None and not artifacts.has_tree(uri):
            raise ValueError(f"challenger {uri} is not in {artifacts.location}")
    meta = {"refresh": {k: v for k, v in result.items() if k not in ("artifact", "artifacts")}, "cycle": spec.cycle}
    with store.session() as s:
        ids = [repo.register_probe(s, member_name(spec.name, m), "primary", uri, reference_fingerprint, meta,
                                   run_id=spec.run_id) for m, uri in enumerate(uris)]
        s.execute(update(RetrainJob).where(RetrainJob.name == spec.name, RetrainJob.state == "pending").values(
            state="done", probe_id=ids[0], finished_at=datetime.now(UTC), result={**result, "member_probe_ids": ids}))
    return ids[0]
