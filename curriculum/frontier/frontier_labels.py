"""Labels across sources and solver versions: trainer outcomes become labels; every reader of labels
(aux retrain, primary refresh, drift, dashboard) gets them through :func:`usable_labels`, which
applies the staleness policy (:mod:`curriculum.frontier.staleness`) for one solver name — and one run: a label
belongs to the run whose spot-check or trainer measured it (another run may replay the same task).

A trainer's ack ``solved`` of ``n`` attempts with ``errors`` infrastructure failures is a label
with ``valid_trials = n − errors`` (errors are excluded, never counted as failures), ``source =
consumer``, and the band rule of spot-checks: no verdict (``in_band = None``) below
``min_valid_trials`` valid attempts; otherwise in band when the solve *rate* lies in
``[lo/k, hi/k]`` — with ``n − errors = k`` exactly the spot-check rule ``lo ≤ solved ≤ hi``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from curriculum.frontier.staleness import LabelRecord, StalenessPolicy, Weighted, weigh
from curriculum.labelling.spotcheck import LabelValue
from curriculum.store import repo, solver_versions
from curriculum.store.models import Label, QueueItem, TaskRow
from probes.band import Band, Side

AUTO_LEAD = "auto"  # frontier.trainer_band_lead: aim one solve ahead only while the trainer's acks say it is ahead


def trainer_label(solved: int, n: int, errors: int, band: Band) -> LabelValue:
    """The label of a trainer outcome (``ValueError`` on impossible counts)."""
    if min(solved, n, errors) < 0 or errors > n or solved + errors > n:
        raise ValueError(f"impossible outcome solved={solved} errors={errors} n={n}: need solved + errors ≤ n")
    valid = n - errors
    if valid < band.min_valid_trials:
        return LabelValue(solved, valid, None)
    return LabelValue(solved, valid, band.lo * valid <= solved * band.k <= band.hi * valid)


@dataclass(frozen=True)
class TrainerOutcome:
    """A trainer's ack of ``task_id``: ``solved`` of ``n`` attempts by ``name@version``."""

    task_id: int
    name: str
    version: str
    solved: int
    n: int
    errors: int = 0
    sampling: Mapping[str, Any] | None = None


def record_trainer_outcomes(sess: Session, outcomes: Sequence[TrainerOutcome], band: Band, *,
                            run_id: int) -> list[LabelValue]:
    """Store trainer outcomes acked to run ``run_id`` as its ``consumer`` labels of ``name@version`` in one
    multi-row write (the versions must be registered already: see :func:`curriculum.store.solver_versions.register`).
    A task the run served unfiltered (``queue.explore``) gives a label marked ``explore``."""
    labs = [trainer_label(o.solved, o.n, o.errors, band) for o in outcomes]
    explored = set(sess.scalars(select(QueueItem.task_id).where(
        QueueItem.run_id == run_id, QueueItem.task_id.in_([o.task_id for o in outcomes]), QueueItem.explore.is_(True))))
    repo.upsert_labels(sess, [
        repo.NewLabel(o.task_id, run_id, solver_versions.qualified_id(o.name, o.version), "consumer", k=o.n,
                      solved=o.solved,
                      valid_trials=lab.valid_trials, band=(band.lo, band.hi), in_band=lab.in_band, errors=o.errors,
                      sampling=o.sampling, explore=True if o.task_id in explored else None)
        for o, lab in zip(outcomes, labs, strict=True)])
    return labs


def label_records(sess: Session, solver_name: str, *, run_id: int,
                  task_ids: Sequence[int] | None = None, sources: Sequence[str] | None = None) -> list[LabelRecord]:
    """Run ``run_id``'s stored labels of ``solver_name`` on valid tasks (among ``task_ids``): whichever run
    created the task, only the labels this run measured."""
    q = (select(Label.task_id, Label.solver_name, Label.solver_version, Label.source, Label.solved,
                Label.valid_trials, Label.in_band, Label.updated_at)
         .join(TaskRow, TaskRow.id == Label.task_id)
         .where(Label.solver_name == solver_name, Label.run_id == run_id, TaskRow.valid))
    if task_ids is not None:
        q = q.where(Label.task_id.in_(list(task_ids)))
    if sources is not None:
        q = q.where(Label.source.in_(list(sources)))
    return [LabelRecord(int(r.task_id), r.solver_name, r.solver_version, r.source, int(r.solved),
                        int(r.valid_trials), r.in_band, r.updated_at) for r in sess.execute(q)]


def labels_written(sess: Session, solver_name: str, run_id: int) -> int:
    """How many labels of ``solver_name`` (every version and source) ``run_id`` wrote on valid tasks:
    a count that only grows (labels are overwritten, never deleted), unlike the usable ones, which
    age out as versions move on. "New labels since the last refresh" is the growth of this count."""
    q = (select(func.count()).select_from(Label).join(TaskRow, TaskRow.id == Label.task_id)
         .where(Label.solver_name == solver_name, Label.run_id == run_id, TaskRow.valid))
    return int(sess.scalar(q) or 0)


@dataclass(frozen=True)
class AckSides:
    """Where a followed trainer's newest acks fell against the band (acks with too few valid attempts left out)."""

    too_easy: int
    in_band: int
    too_hard: int

    @property
    def lead(self) -> int:
        """``frontier.trainer_band_lead = "auto"``: one solve ahead while more of the newest acks lie above the band
        than below it (the served mix is behind the trainer), else the band itself. A trainer that fails most
        served tasks (a weak LM: 0 of 8) is never aimed ahead: a lead would count its failures as in band."""
        return 1 if self.too_easy > self.too_hard else 0

    def __str__(self) -> str:
        n = self.too_easy + self.in_band + self.too_hard
        return f"{self.too_easy} of the newest {n} acks above the band, {self.too_hard} below"


def newest_ack_sides(sess: Session, solver_name: str, *, run_id: int, newest: int, band: Band) -> AckSides:
    """The sides of run ``run_id``'s ``newest`` trainer labels (``source = consumer``) of ``solver_name`` on valid
    tasks, read from each label's own counts, every version."""
    rows = sess.execute(select(Label.solved, Label.valid_trials).join(TaskRow, TaskRow.id == Label.task_id)
                        .where(Label.solver_name == solver_name, Label.run_id == run_id, Label.source == "consumer",
                               TaskRow.valid)
                        .order_by(Label.id.desc()).limit(newest)).all()
    sides = [band.side(int(r.solved), int(r.valid_trials)) for r in rows]
    return AckSides(sides.count(Side.TOO_EASY), sides.count(Side.IN_BAND), sides.count(Side.TOO_HARD))


def usable_labels(sess: Session, solver_name: str, policy: StalenessPolicy, *, run_id: int,
                  task_ids: Sequence[int] | None = None, sources: Sequence[str] | None = None) -> list[Weighted]:
    """Run ``run_id``'s labels of ``solver_name`` that still count under ``policy``
    (see :func:`curriculum.frontier.staleness.weigh`)."""
    ages = solver_versions.ages(solver_versions.versions(sess, solver_name))
    return weigh(label_records(sess, solver_name, run_id=run_id, task_ids=task_ids, sources=sources),
                 solver_name, ages, policy)
