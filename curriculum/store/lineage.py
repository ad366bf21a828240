"""Lineage of stored scores: which probe ensemble produced each probe score and false positive.

An :class:`EnsembleSpec` is what a scorer reports with its scores (combine rule, member and aux
artifact addresses). :func:`record_ensemble` turns it into a ``probe_ensembles`` row (idempotent on
``(run, key)``); every ``probe_scores`` and ``false_positives`` row names that row, and an emitted
message's ``provenance.probe_ensemble_id`` is the key of the ensemble of the score it carries.

A task may be scored more than once (the same content sampled again under a later ensemble); its
*current* score is the newest row (:func:`latest_score_of`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session, aliased

from curriculum.store.artifacts import is_cas_uri, parse_cas_uri
from curriculum.store.db import insert_ignore
from curriculum.store.models import FP_SIDES, FalsePositive, ProbeEnsembleRow, ProbeRow, ProbeScore, utcnow


@dataclass(frozen=True)
class EnsembleSpec:
    """A scorer's ensemble: ``combine`` over ``members``, then ``min`` with every ``aux`` constraint.

    ``members`` and ``aux`` are artifact URIs as the probe registry holds them.
    """

    combine: str
    members: tuple[str, ...]
    aux: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``ens-`` + 16 hex: a hash of the combine rule and the ordered member and aux addresses."""
        h = hashlib.sha256(self.combine.encode())
        for group in (self.members, self.aux):
            h.update(b"|")
            for uri in group:
                h.update(uri.encode() + b"\n")
        return "ens-" + h.hexdigest()[:16]


def artifact_sha256(uri: str) -> str | None:
    """The content address of a ``cas://sha256/<hex>`` URI; None for a plain path."""
    return parse_cas_uri(uri) if is_cas_uri(uri) else None


def record_ensemble(sess: Session, run_id: int | None, spec: EnsembleSpec) -> int:
    """The id of ``spec``'s ensemble row in ``run_id``, created on first use."""
    key = spec.key
    found = _ensemble_id(sess, run_id, key)
    if found is not None:
        return found
    by_uri = _probes_by_uri(sess, run_id, [*spec.members, *spec.aux])

    def entry(uri: str) -> dict[str, Any]:
        probe = by_uri.get(uri)
        return {"probe_id": probe.id if probe else None, "name": probe.name if probe else None,
                "artifact_uri": uri, "sha256": artifact_sha256(uri)}

    insert_ignore(sess, ProbeEnsembleRow, [{
        "run_id": run_id, "key": key, "combine": spec.combine, "members": [entry(u) for u in spec.members],
        "aux": [entry(u) for u in spec.aux], "created_at": utcnow()}], ["run_id", "key"])
    found = _ensemble_id(sess, run_id, key)
    assert found is not None, f"ensemble {key} vanished"
    return found


def _ensemble_id(sess: Session, run_id: int | None, key: str) -> int | None:
    run_match = ProbeEnsembleRow.run_id.is_(None) if run_id is None else ProbeEnsembleRow.run_id == run_id
    q = select(ProbeEnsembleRow.id).where(run_match, ProbeEnsembleRow.key == key).order_by(ProbeEnsembleRow.id)
    return sess.scalars(q.limit(1)).first()


def _probes_by_uri(sess: Session, run_id: int | None, uris: Sequence[str]) -> dict[str, ProbeRow]:
    q = select(ProbeRow).where(ProbeRow.artifact_uri.in_(list(uris)))
    if run_id is not None:
        q = q.where(ProbeRow.run_id == run_id)
    out: dict[str, ProbeRow] = {}
    for row in sess.scalars(q.order_by(ProbeRow.id)):
        out.setdefault(row.artifact_uri, row)
    return out


def ensemble_by_key(sess: Session, run_id: int | None, key: str) -> ProbeEnsembleRow | None:
    found = _ensemble_id(sess, run_id, key)
    return None if found is None else sess.get(ProbeEnsembleRow, found)


def record_probe_scores(sess: Session, ensemble_id: int, scores: Iterable[tuple[int, float, float]]) -> int:
    """Store ``(task_id, logit, probability)`` of an ensemble; re-scoring a task by it is a no-op."""
    now = utcnow()
    rows = [{"task_id": t, "ensemble_id": ensemble_id, "logit": float(lg), "probability": float(p),
             "created_at": now} for t, lg, p in scores]
    return insert_ignore(sess, ProbeScore, rows, ["task_id", "ensemble_id"])


def latest_score_of(task_id: Any) -> ColumnElement[bool]:
    """A join condition selecting the newest ``ProbeScore`` of ``task_id`` (a column or a value)."""
    newer = aliased(ProbeScore)
    newest = select(func.max(newer.id)).where(newer.task_id == task_id).scalar_subquery()
    return (ProbeScore.task_id == task_id) & (ProbeScore.id == newest)


def latest_scores(sess: Session, task_ids: Sequence[int]) -> dict[int, tuple[int, float]]:
    """``task_id → (ensemble_id, probability)`` of each task's newest score (tasks never scored are absent)."""
    out: dict[int, tuple[int, float]] = {}
    ids = list(task_ids)
    for i in range(0, len(ids), 500):
        newest = (select(func.max(ProbeScore.id)).where(ProbeScore.task_id.in_(ids[i:i + 500]))
                  .group_by(ProbeScore.task_id))
        q = select(ProbeScore.task_id, ProbeScore.ensemble_id, ProbeScore.probability).where(ProbeScore.id.in_(newest))
        out.update({int(t): (int(e), float(p)) for t, e, p in sess.execute(q)})
    return out


def add_false_positives(sess: Session, rows: Iterable[tuple[int, int, str, int, int, float]]) -> int:
    """Record ``(task_id, ensemble_id, side, solved, k, score)`` false positives; idempotent."""
    out = []
    for task_id, ensemble_id, side, solved, k, score in rows:
        if side not in FP_SIDES:
            raise ValueError(f"false-positive side must be one of {FP_SIDES}, got {side!r}")
        out.append({"task_id": task_id, "ensemble_id": ensemble_id, "side": side, "solved": solved, "k": k,
                    "score": score, "consumed": False, "created_at": utcnow()})
    return insert_ignore(sess, FalsePositive, out, ["task_id", "ensemble_id"])


def false_positive_tasks(sess: Session, run_id: int, *, unconsumed_only: bool = False) -> list[int]:
    """Task ids with a false-positive row among the run's ensembles (each once, ascending)."""
    q = (select(FalsePositive.task_id).join(ProbeEnsembleRow, ProbeEnsembleRow.id == FalsePositive.ensemble_id)
         .where(ProbeEnsembleRow.run_id == run_id))
    if unconsumed_only:
        q = q.where(~FalsePositive.consumed)
    return sorted({int(t) for t in sess.scalars(q)})


def mark_false_positives_consumed(sess: Session, run_id: int, task_ids: Sequence[int]) -> None:
    """Mark the run's false-positive rows of ``task_ids`` consumed (an aux probe trained on them is active)."""
    ensembles = select(ProbeEnsembleRow.id).where(ProbeEnsembleRow.run_id == run_id)
    for i in range(0, len(task_ids), 500):
        sess.execute(update(FalsePositive).where(FalsePositive.task_id.in_(list(task_ids[i:i + 500])),
                                                 FalsePositive.ensemble_id.in_(ensembles)).values(consumed=True))


def ensemble_keys(sess: Session, ids: Iterable[int]) -> Mapping[int, str]:
    q = select(ProbeEnsembleRow.id, ProbeEnsembleRow.key).where(ProbeEnsembleRow.id.in_(list(set(ids))))
    return {int(i): str(k) for i, k in sess.execute(q)}
