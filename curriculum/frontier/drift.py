"""Drift: how far a new solver version moved the frontier.

When a new version of the solver is announced, the driver re-measures a *stratified* sample of tasks
already labelled under older versions — up to ``per_stratum`` tasks each that were too easy, in band
and too hard — against the new version, within a share of the spot-check budget. Each re-measured
task gives an old → new stratum transition; the **drift score** of the version is the share of
formerly in-band tasks that left the band (None until one was measured). The score is stored per
version, recorded as the ``drift_score`` metric (Prometheus ``propel_drift_score_ratio``, alert rule
``frontier_drift``) and triggers a primary-probe refresh above a threshold.

Pure functions first (tested with tables), then the store-bound bookkeeping.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from curriculum.frontier.staleness import LabelRecord, Weighted, freshest_per_task
from curriculum.store.db import insert_ignore
from curriculum.store.models import DriftMeasurement
from probes.band import Band

STRATA = ("too_easy", "in_band", "too_hard")


def stratum(solved: int, valid_trials: int, in_band: bool | None, band: Band) -> str | None:
    """Where a label puts its task relative to the band (None: no verdict)."""
    if in_band is None or valid_trials <= 0:
        return None
    if in_band:
        return "in_band"
    return "too_hard" if solved * band.k < band.lo * valid_trials else "too_easy"


def stratified_sample(strata: Mapping[int, str], per_stratum: int, seed: int) -> dict[int, str]:
    """Up to ``per_stratum`` task ids from each stratum, chosen deterministically from ``seed``."""
    out: dict[int, str] = {}
    for name in STRATA:
        ids = sorted(t for t, s in strata.items() if s == name)
        random.Random(f"{seed}|{name}").shuffle(ids)
        out.update({t: name for t in ids[:per_stratum]})
    return out


def transition_matrix(pairs: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """Counts of (old stratum → new stratum); every cell present (zeros included)."""
    matrix = {a: dict.fromkeys(STRATA, 0) for a in STRATA}
    for old, new in pairs:
        matrix[old][new] += 1
    return matrix


def drift_score(matrix: Mapping[str, Mapping[str, int]]) -> float | None:
    """Share of formerly in-band tasks that left the band (None when none was re-measured)."""
    row = matrix.get("in_band", {})
    total = sum(row.values())
    return None if total == 0 else (total - row.get("in_band", 0)) / total


def old_strata(weighted: Sequence[Weighted], band: Band) -> dict[int, str]:
    """The stratum of each task under the freshest *older* label (ages ≥ 1) that has a verdict."""
    older = [w for w in weighted if w.age >= 1 and w.label.in_band is not None]
    best = freshest_per_task(older)
    out = {}
    for task_id, w in best.items():
        s = stratum(w.label.solved, w.label.valid_trials, w.label.in_band, band)
        if s is not None:
            out[task_id] = s
    return out


def measured_pairs(sample: Mapping[int, str], new_labels: Iterable[LabelRecord], band: Band
                   ) -> dict[int, tuple[str, str]]:
    """(old, new) strata of the sampled tasks that have a verdict under the new version (a spot-check
    label wins over a trainer outcome for the same task)."""
    out: dict[int, tuple[str, str]] = {}
    for lab in sorted(new_labels, key=lambda lab: lab.source == "spotcheck"):  # spot-checks last: they win
        old = sample.get(lab.task_id)
        new = stratum(lab.solved, lab.valid_trials, lab.in_band, band)
        if old is not None and new is not None:
            out[lab.task_id] = (old, new)
    return out


# ---------------------------------------------------------------------------------------- store
@dataclass(frozen=True)
class Drift:
    id: int
    solver: str
    old_version: str
    new_version: str
    cycle: int
    state: str
    sample: dict[int, str]
    matrix: dict[str, dict[str, int]]
    measured: int
    score: float | None


def _drift(row: DriftMeasurement) -> Drift:
    return Drift(row.id, row.solver, row.old_version, row.new_version, row.cycle, row.state,
                 {int(t): s for t, s in row.sample.items()}, {a: dict(b) for a, b in row.matrix.items()},
                 row.measured, row.score)


def open_measurement(sess: Session, run_id: int, solver: str, old_version: str, new_version: str, cycle: int,
                     sample: Mapping[int, str]) -> Drift:
    """Record the measurement of ``new_version`` (idempotent: the first sample stays)."""
    insert_ignore(sess, DriftMeasurement, [{
        "run_id": run_id, "solver": solver, "old_version": old_version, "new_version": new_version, "cycle": cycle,
        "state": "measuring" if sample else "done", "sample": {str(t): s for t, s in sample.items()},
        "matrix": transition_matrix([]), "measured": 0, "score": None, "created_at": datetime.now(UTC),
        "finished_at": None if sample else datetime.now(UTC)}], ["run_id", "solver", "new_version"])
    row = sess.scalars(select(DriftMeasurement).where(
        DriftMeasurement.run_id == run_id, DriftMeasurement.solver == solver,
        DriftMeasurement.new_version == new_version)).one()
    return _drift(row)


def update_measurement(sess: Session, drift_id: int, pairs: Mapping[int, tuple[str, str]], done: bool) -> Drift:
    """Store the transitions measured so far (and close the measurement when ``done``)."""
    matrix = transition_matrix(pairs.values())
    values: dict[str, object] = {"matrix": matrix, "measured": len(pairs), "score": drift_score(matrix)}
    if done:
        values |= {"state": "done", "finished_at": datetime.now(UTC)}
    sess.execute(update(DriftMeasurement).where(DriftMeasurement.id == drift_id).values(**values))
    return _drift(sess.scalars(select(DriftMeasurement).where(DriftMeasurement.id == drift_id)).one())


def measurements(sess: Session, run_id: int, solver: str | None = None, state: str | None = None) -> list[Drift]:
    q = select(DriftMeasurement).where(DriftMeasurement.run_id == run_id)
    if solver is not None:
        q = q.where(DriftMeasurement.solver == solver)
    if state is not None:
        q = q.where(DriftMeasurement.state == state)
    return [_drift(r) for r in sess.scalars(q.order_by(DriftMeasurement.id))]
