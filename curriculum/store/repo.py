"""Repository functions over the store. Every insert of a natural key is idempotent.

Functions take an open :class:`~sqlalchemy.orm.Session` (so callers compose them into one
transaction, e.g. task state + queue row in the emission outbox) and work on PostgreSQL and SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import (
    LABEL_SOURCES,
    PROBE_ROLES,
    TRIAL_OUTCOMES,
    AlertRow,
    Base,
    DaemonState,
    GeneratorCheckpoint,
    Label,
    MetricPoint,
    ProbeRow,
    QueueItem,
    Run,
    SolverTrial,
    TaskRow,
    utcnow,
)


@dataclass(frozen=True)
class NewTask:
    """A task to store; ``content_hash`` is the dedupe key within ``domain``."""

    domain: str
    content_hash: str
    text: str
    valid: bool
    payload: Mapping[str, Any] = field(default_factory=dict)
    invalid_reason: str | None = None
    topic: str | None = None
    cycle: int | None = None
    generator_step: int | None = None
    adapter_hash: str | None = None


@dataclass(frozen=True)
class NewTrial:
    task_id: int
    solver_id: str
    attempt: int
    outcome: str
    reason: str | None = None
    answer: str | None = None
    latency_s: float = 0.0


def get_or_create_run(sess: Session, name: str, config_hash: str, config: Mapping[str, Any]) -> int:
    """The id of run ``name``, created on first use (the config of the first start is kept)."""
    insert_ignore(
        sess, Run, [{"name": name, "config_hash": config_hash, "config": dict(config),
                               "created_at": utcnow()}], ["name"]
    )
    return int(sess.scalars(select(Run.id).where(Run.name == name)).one())


def add_tasks(sess: Session, run_id: int | None, tasks: Sequence[NewTask]) -> list[int]:
    """Insert tasks, skipping ones already stored; returns the id of each, in input order."""
    now = utcnow()
    rows = [
        {"run_id": run_id, "domain": t.domain, "content_hash": t.content_hash, "text": t.text,
         "payload": dict(t.payload), "valid": t.valid, "invalid_reason": t.invalid_reason,
         "topic": t.topic, "cycle": t.cycle, "generator_step": t.generator_step,
         "adapter_hash": t.adapter_hash, "created_at": now}
        for t in tasks
    ]
    insert_ignore(sess, TaskRow, rows, ["domain", "content_hash"])
    ids = _stored_ids(sess, {(t.domain, t.content_hash) for t in tasks})
    return [ids[(t.domain, t.content_hash)] for t in tasks]


def new_task_keys(sess: Session, tasks: Sequence[NewTask]) -> set[tuple[str, str]]:
    """The distinct ``(domain, content_hash)`` keys of ``tasks`` that no stored task has (what ``add_tasks``
    would insert)."""
    keys = {(t.domain, t.content_hash) for t in tasks}
    return keys - set(_stored_ids(sess, keys))


def _stored_ids(sess: Session, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The task id of each ``(domain, content_hash)`` key that is stored, looked up 500 hashes at a time."""
    ids: dict[tuple[str, str], int] = {}
    for domain in {d for d, _ in keys}:
        hashes = [h for d, h in keys if d == domain]
        for chunk in _chunks(hashes, 500):
            q = select(TaskRow.id, TaskRow.content_hash).where(
                TaskRow.domain == domain, TaskRow.content_hash.in_(chunk)
            )
            ids.update({(domain, h): i for i, h in sess.execute(q)})
    return ids


def add_trials(sess: Session, trials: Sequence[NewTrial]) -> int:
    """Insert solver trials idempotently on ``(task, solver, attempt)``; returns rows inserted."""
    for t in trials:
        if t.outcome not in TRIAL_OUTCOMES:
            raise ValueError(f"trial outcome must be one of {TRIAL_OUTCOMES}, got {t.outcome!r}")
    now = utcnow()
    rows = [{"task_id": t.task_id, "solver_id": t.solver_id, "attempt": t.attempt,
             **_name_version(t.solver_id), "outcome": t.outcome, "reason": t.reason, "answer": t.answer,
             "latency_s": t.latency_s, "created_at": now} for t in trials]
    inserted = 0
    for chunk in _chunks(rows, 1000):
        inserted += insert_ignore(sess, SolverTrial, chunk, ["task_id", "solver_id", "attempt"])
    return inserted


def _name_version(solver_id: str) -> dict[str, str]:
    """The ``solver_name`` / ``solver_version`` columns of a qualified solver id (``name@version``)."""
    from curriculum.store.solver_versions import split_solver_id

    name, version = split_solver_id(solver_id)
    return {"solver_name": name, "solver_version": version}


def trial_count(sess: Session, run_id: int) -> int:
    """Solver trials stored for the run's tasks (every solver)."""
    q = select(func.count()).select_from(SolverTrial).join(TaskRow, TaskRow.id == SolverTrial.task_id)
    return int(sess.execute(q.where(TaskRow.run_id == run_id)).scalar_one())


@dataclass(frozen=True)
class NewLabel:
    """One label to write with :func:`upsert_labels`: of ``task_id`` as measured for run ``run_id``
    (another run replaying the task keeps its own label); ``solver_id`` is qualified (``name@version``)."""

    task_id: int
    run_id: int
    solver_id: str
    source: str
    k: int
    solved: int
    valid_trials: int
    band: tuple[int, int]
    in_band: bool | None
    errors: int = 0
    sampling: Mapping[str, Any] | None = None
    explore: bool | None = None  # a trainer's outcome of a task served unfiltered (curriculum.store.queue)


_LABEL_KEY = ("task_id", "run_id", "solver_id", "source")


def upsert_label(sess: Session, task_id: int, solver_id: str, source: str, *, run_id: int, k: int, solved: int,
                 valid_trials: int, band: tuple[int, int], in_band: bool | None, errors: int = 0,
                 sampling: Mapping[str, Any] | None = None) -> None:
    """Create or overwrite the label of ``(task, run, solver, source)``; ``solver_id`` is qualified
    (``name@version``, see :mod:`curriculum.store.solver_versions`)."""
    upsert_labels(sess, [NewLabel(task_id, run_id, solver_id, source, k, solved, valid_trials, band, in_band, errors,
                                  sampling)])


def upsert_labels(sess: Session, labels: Sequence[NewLabel]) -> None:
    """Create or overwrite many labels: one multi-row insert when they are all new (a batched ack's
    case), an update per label only when some already existed."""
    for lab in labels:
        if lab.source not in LABEL_SOURCES:
            raise ValueError(f"label source must be one of {LABEL_SOURCES}, got {lab.source!r}")
        if not isinstance(lab.run_id, int):  # NULL never conflicts on PostgreSQL: it would duplicate labels
            raise ValueError(f"a label needs the run that measured it, got run_id={lab.run_id!r}")
    now = utcnow()
    rows = [{"task_id": lab.task_id, "run_id": lab.run_id, "solver_id": lab.solver_id, "source": lab.source,
             **_name_version(lab.solver_id), **_label_values(lab, now)} for lab in labels]
    if insert_ignore(sess, Label, rows, list(_LABEL_KEY)) == len(rows):
        return
    for lab in labels:  # some existed: overwrite them (rewriting the just-inserted ones is harmless)
        sess.execute(update(Label).where(Label.task_id == lab.task_id, Label.run_id == lab.run_id,
                                         Label.solver_id == lab.solver_id, Label.source == lab.source)
                     .values(**_label_values(lab, now)))


def _label_values(lab: NewLabel, now: datetime) -> dict[str, Any]:
    return {"k": lab.k, "solved": lab.solved, "valid_trials": lab.valid_trials, "band_lo": lab.band[0],
            "band_hi": lab.band[1], "in_band": lab.in_band, "errors": lab.errors,
            "sampling": dict(lab.sampling) if lab.sampling is not None else None, "explore": lab.explore,
            "updated_at": now}


def register_probe(sess: Session, name: str, role: str, artifact_uri: str, reference_fingerprint: str,
                   meta: Mapping[str, Any], active: bool = False, run_id: int | None = None) -> int:
    """Register a probe artifact of ``run_id`` (idempotent on ``name``); returns its id."""
    if role not in PROBE_ROLES:
        raise ValueError(f"probe role must be one of {PROBE_ROLES}, got {role!r}")
    insert_ignore(sess, ProbeRow, [{
        "run_id": run_id, "name": name, "role": role, "artifact_uri": artifact_uri,
        "reference_fingerprint": reference_fingerprint, "meta": dict(meta), "active": active,
        "created_at": utcnow()}], ["name"])
    return int(sess.scalars(select(ProbeRow.id).where(ProbeRow.name == name)).one())


def set_active_probes(sess: Session, probe_ids: Sequence[int], run_id: int | None = None) -> None:
    """Make exactly ``probe_ids`` the active set of ``run_id`` (of the whole store when None)."""
    off = update(ProbeRow).values(active=False)
    sess.execute(off if run_id is None else off.where(ProbeRow.run_id == run_id))
    if probe_ids:
        sess.execute(update(ProbeRow).where(ProbeRow.id.in_(list(probe_ids))).values(active=True))


def active_probes(sess: Session, run_id: int | None = None) -> list[ProbeRow]:
    """The active probes of ``run_id`` (of the whole store when None), oldest first."""
    q = select(ProbeRow).where(ProbeRow.active)
    if run_id is not None:
        q = q.where(ProbeRow.run_id == run_id)
    return list(sess.scalars(q.order_by(ProbeRow.id)))


def primary_probe_id(sess: Session, run_id: int | None = None) -> int | None:
    """The first active primary probe of ``run_id``."""
    ids = [p.id for p in active_probes(sess, run_id) if p.role == "primary"]
    return ids[0] if ids else None


def add_checkpoint(sess: Session, run_id: int, step: int, adapter_hash: str, artifact_uri: str) -> None:
    """Record a committed RL checkpoint (its tree in the artifact store); idempotent on ``(run, step)``."""
    insert_ignore(sess, GeneratorCheckpoint, [{
        "run_id": run_id, "step": step, "adapter_hash": adapter_hash, "artifact_uri": artifact_uri,
        "created_at": utcnow()}], ["run_id", "step"])


def latest_checkpoint(sess: Session, run_id: int) -> GeneratorCheckpoint | None:
    q = select(GeneratorCheckpoint).where(GeneratorCheckpoint.run_id == run_id)
    return sess.scalars(q.order_by(GeneratorCheckpoint.step.desc()).limit(1)).first()


def record_metrics(sess: Session, run_id: int, cycle: int, values: Mapping[str, float]) -> int:
    """Store one cycle's metrics; a metric already recorded for that cycle keeps its first value."""
    now = utcnow()
    rows = [{"run_id": run_id, "cycle": cycle, "name": n, "value": float(v), "at": now}
            for n, v in values.items()]
    return insert_ignore(sess, MetricPoint, rows, ["run_id", "cycle", "name"])


def metric_history(sess: Session, run_id: int, names: Sequence[str] | None = None) -> list[MetricPoint]:
    q = select(MetricPoint).where(MetricPoint.run_id == run_id)
    if names:
        q = q.where(MetricPoint.name.in_(list(names)))
    return list(sess.scalars(q.order_by(MetricPoint.cycle, MetricPoint.name)))


def fire_alert(sess: Session, run_id: int, *, rule: str, severity: str, metric: str, value: float,
               threshold: float, cycle: int, mitigation: str | None = None) -> int:
    row = AlertRow(run_id=run_id, rule=rule, severity=severity, metric=metric, value=value,
                   threshold=threshold, cycle_fired=cycle, mitigation=mitigation)
    sess.add(row)
    sess.flush()
    return row.id


def resolve_alert(sess: Session, alert_id: int, cycle: int, at: datetime | None = None) -> None:
    sess.execute(update(AlertRow).where(AlertRow.id == alert_id, AlertRow.resolved_at.is_(None))
                 .values(resolved_at=at or utcnow(), cycle_resolved=cycle))


def open_alerts(sess: Session, run_id: int) -> list[AlertRow]:
    q = select(AlertRow).where(AlertRow.run_id == run_id, AlertRow.resolved_at.is_(None))
    return list(sess.scalars(q.order_by(AlertRow.id)))


def load_state(sess: Session, run_id: int) -> DaemonState:
    """The driver state row of a run, created (phase ``rl``, cycle 0) on first use."""
    insert_ignore(sess, DaemonState, [{"run_id": run_id, "phase": "rl", "cycle": 0,
                                                 "counters": {}, "updated_at": utcnow()}], ["run_id"])
    return sess.scalars(select(DaemonState).where(DaemonState.run_id == run_id)).one()


def save_state(sess: Session, run_id: int, *, phase: str, cycle: int, counters: Mapping[str, Any]) -> None:
    sess.execute(update(DaemonState).where(DaemonState.run_id == run_id).values(
        phase=phase, cycle=cycle, counters=dict(counters), updated_at=utcnow()))


def table_counts(sess: Session) -> dict[str, int]:
    """Row count of every table (for ``propel status``)."""
    return {name: int(sess.execute(select(func.count()).select_from(table)).scalar_one())
            for name, table in Base.metadata.tables.items()}


def queue_depths(sess: Session, run_id: int | None = None) -> dict[str, int]:
    """Queue rows per state, of run ``run_id`` (of the whole store when None)."""
    q = select(QueueItem.state, func.count()).group_by(QueueItem.state)
    if run_id is not None:
        q = q.where(QueueItem.run_id == run_id)
    return {state: int(n) for state, n in sess.execute(q)}


def recently_emitted(sess: Session, run_id: int, limit: int) -> tuple[list[str], list[str | None]]:
    """Texts and topics of the run's ``limit`` most recently emitted (queued) tasks, oldest first."""
    rows = sess.execute(select(TaskRow.text, QueueItem.topic).join(TaskRow, TaskRow.id == QueueItem.task_id)
                        .where(QueueItem.run_id == run_id)
                        .order_by(QueueItem.enqueued_at.desc(), QueueItem.id.desc()).limit(limit)).all()
    return [r.text for r in reversed(rows)], [r.topic for r in reversed(rows)]


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
