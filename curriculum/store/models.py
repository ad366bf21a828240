"""SQLAlchemy 2 typed ORM schema of the store (PostgreSQL in production, SQLite embedded).

Natural keys carry unique constraints so that every write path can be idempotent
(``ON CONFLICT DO NOTHING``): a task is unique per (domain, content hash), a trial per
(task, solver, attempt), a label per (task, run, solver, source), a probe score per (task, probe).
Constraint names follow one naming convention so Alembic migrations work on both databases.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

TRIAL_OUTCOMES = ("pass", "fail", "null")
LABEL_SOURCES = ("spotcheck", "consumer")
QUEUE_STATES = ("ready", "leased", "acked", "dead", "stale")  # stale: retired after a primary-probe refresh
PROBE_ROLES = ("primary", "aux")
FP_SIDES = ("too_easy", "too_hard")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on both databases.

    PostgreSQL keeps ``timestamptz``; SQLite has no time zones, so values are stored as naive UTC
    (which sorts and compares correctly as text) and read back as aware UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, datetime: UTCDateTime()}


class Run(Base):
    """One service run (a named, configured daemon lifetime that may span restarts)."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    config_hash: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TaskRow(Base):
    """A generated task: text, structured payload, validity, topic and generator provenance."""

    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("domain", "content_hash"),
        Index("ix_tasks_run_created", "run_id", "created_at"),
        Index("ix_tasks_run_cycle", "run_id", "cycle"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    domain: Mapped[str] = mapped_column(String(32))
    content_hash: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    valid: Mapped[bool] = mapped_column(Boolean)
    invalid_reason: Mapped[str | None] = mapped_column(Text)
    topic: Mapped[str | None] = mapped_column(String(128))
    cycle: Mapped[int | None] = mapped_column(Integer)
    generator_step: Mapped[int | None] = mapped_column(Integer)
    adapter_hash: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProbeRow(Base):
    """Registry of trained probes (primary or auxiliary) with metadata and artifact location.

    ``active`` is per run: each run's reward reads its own active set.
    """

    __tablename__ = "probes"
    __table_args__ = (CheckConstraint("role IN ('primary', 'aux')", name="role"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    artifact_uri: Mapped[str] = mapped_column(Text)
    reference_fingerprint: Mapped[str] = mapped_column(String(128))
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    active: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProbeEnsembleRow(Base):
    """A probe ensemble exactly as it scored tasks: combine rule, members and aux constraints.

    ``key`` (``ens-`` + 16 hex of a sha256 over the combine rule and every member's and constraint's
    artifact address) is the id emitted messages carry as ``provenance.probe_ensemble_id``;
    ``members``/``aux`` list ``{"probe_id", "name", "artifact_uri", "sha256"}`` (``sha256`` is the
    content address of the artifact, null for artifacts stored before content addressing).
    """

    __tablename__ = "probe_ensembles"
    __table_args__ = (UniqueConstraint("run_id", "key"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(64))
    combine: Mapped[str] = mapped_column(String(8))
    members: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    aux: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProbeScore(Base):
    """The logit and probability an ensemble (members + aux constraints) gave a task."""

    __tablename__ = "probe_scores"
    __table_args__ = (UniqueConstraint("task_id", "ensemble_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    ensemble_id: Mapped[int] = mapped_column(ForeignKey("probe_ensembles.id", ondelete="CASCADE"), index=True)
    logit: Mapped[float] = mapped_column(Float)
    probability: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SolverTrial(Base):
    """One solver attempt at a task: pass, fail or null (timeout/infra error, excluded from counts)."""

    __tablename__ = "solver_trials"
    __table_args__ = (
        UniqueConstraint("task_id", "solver_id", "attempt"),
        Index("ix_solver_trials_solver_created", "solver_id", "created_at"),
        Index("ix_solver_trials_name_created", "solver_name", "created_at"),  # hourly budget window
        CheckConstraint("outcome IN ('pass', 'fail', 'null')", name="outcome"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    solver_id: Mapped[str] = mapped_column(String(256))  # qualified: name@version (name when unversioned)
    solver_name: Mapped[str] = mapped_column(String(256))
    solver_version: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str | None] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AgentTurn(Base):
    """One model turn of an agent episode, in order: a solver trial's (``role = 'solver'``, keyed like
    the trial by solver id and attempt) or the episode that wrote a task (``role = 'generator'``,
    ``agent_id`` the generator, attempt 0). Trajectory probes read these."""

    __tablename__ = "agent_turns"
    __table_args__ = (UniqueConstraint("task_id", "role", "agent_id", "attempt", "turn"),
                      CheckConstraint("role IN ('solver', 'generator')", name="role"))
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))
    agent_id: Mapped[str] = mapped_column(String(256))
    attempt: Mapped[int] = mapped_column(Integer)
    turn: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    tool_calls: Mapped[list[Any]] = mapped_column(JSON)
    tool_results: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Label(Base):
    """Utility label of a task for a solver version: solves over valid trials and whether it is in band.

    ``source`` is ``spotcheck`` (the daemon's own trials) or ``consumer`` (a trainer's acked outcome,
    whose ``errors`` — infrastructure failures — are excluded from ``valid_trials`` and whose
    ``sampling`` settings are kept when the trainer gave them).

    ``run_id`` is the run whose spot-check or trainer measured it: another run may replay the same task
    (``propel tasks import``), and each run's readers see only their own labels. NULL only for a label
    whose run was deleted (or whose task had no run when migration 0010 carried it over).
    """

    __tablename__ = "labels"
    __table_args__ = (UniqueConstraint("task_id", "run_id", "solver_id", "source"),
                      Index("ix_labels_name_version", "solver_name", "solver_version"),
                      Index("ix_labels_run_name", "run_id", "solver_name"))
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    solver_id: Mapped[str] = mapped_column(String(256))  # qualified: name@version (name when unversioned)
    solver_name: Mapped[str] = mapped_column(String(256))
    solver_version: Mapped[str] = mapped_column(String(128))
    source: Mapped[str] = mapped_column(String(16), default="spotcheck")
    k: Mapped[int] = mapped_column(Integer)
    solved: Mapped[int] = mapped_column(Integer)
    valid_trials: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    band_lo: Mapped[int] = mapped_column(Integer)
    band_hi: Mapped[int] = mapped_column(Integer)
    in_band: Mapped[bool | None] = mapped_column(Boolean)
    explore: Mapped[bool | None] = mapped_column(Boolean)  # a trainer's label of a task served unfiltered (#36)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class SolverVersionRow(Base):
    """A known version of a named solver and its order (see :mod:`curriculum.store.solver_versions`)."""

    __tablename__ = "solver_versions"
    __table_args__ = (UniqueConstraint("solver", "version"),
                      Index("ix_solver_versions_solver_ordinal", "solver", "ordinal"))
    id: Mapped[int] = mapped_column(primary_key=True)
    solver: Mapped[str] = mapped_column(String(256))
    version: Mapped[str] = mapped_column(String(128))
    ordinal: Mapped[int | None] = mapped_column(BigInteger)  # None: unordered legacy version
    source: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class DriftMeasurement(Base):
    """Re-measurement of a stratified sample of labelled tasks on a new solver version.

    ``sample`` maps task id → its stratum under the old version (``too_easy`` / ``in_band`` /
    ``too_hard``); ``matrix`` counts old → new strata of the tasks measured so far; ``score`` is the
    share of formerly in-band tasks that left the band (None until one was measured).
    """

    __tablename__ = "drift_measurements"
    __table_args__ = (UniqueConstraint("run_id", "solver", "new_version"),
                      CheckConstraint("state IN ('measuring', 'done')", name="state"))
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    solver: Mapped[str] = mapped_column(String(256))
    old_version: Mapped[str] = mapped_column(String(128))
    new_version: Mapped[str] = mapped_column(String(128))
    cycle: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="measuring")
    sample: Mapped[dict[str, Any]] = mapped_column(default=dict)
    matrix: Mapped[dict[str, Any]] = mapped_column(default=dict)
    measured: Mapped[int] = mapped_column(Integer, default=0)
    score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class FalsePositive(Base):
    """A valid task an ensemble scored as frontier whose real solve count fell outside the band.

    The aux-probe retrain reads its negatives from here and marks them ``consumed`` once its probe
    is active; unconsumed rows are what triggers the next retrain.
    """

    __tablename__ = "false_positives"
    __table_args__ = (
        UniqueConstraint("task_id", "ensemble_id"),
        CheckConstraint("side IN ('too_easy', 'too_hard')", name="side"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    ensemble_id: Mapped[int] = mapped_column(ForeignKey("probe_ensembles.id", ondelete="CASCADE"), index=True)
    side: Mapped[str] = mapped_column(String(16))
    solved: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    consumed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RetrainJob(Base):
    """One aux-probe retrain: requested by the leader, carried out in-process or by a ``retrain`` worker.

    ``spec`` holds everything the job needs (JSON, it is also the Celery message); the worker writes
    the outcome here — ``done`` with the registered (inactive) probe, ``skipped`` when the labelled
    set lacks a class, ``failed`` with the error — and the leader activates a ``done`` probe.
    """

    __tablename__ = "retrain_jobs"
    __table_args__ = (CheckConstraint("state IN ('pending', 'done', 'skipped', 'failed')", name="state"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    cycle: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(8), default="pending")
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    probe_id: Mapped[int | None] = mapped_column(ForeignKey("probes.id", ondelete="SET NULL"))
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()


class GeneratorCheckpoint(Base):
    """A committed RL checkpoint (LoRA adapter, optimizer, scheduler, RNG, trainer state) at a global step.

    ``artifact_uri`` is the checkpoint directory in the artifact store (``cas://sha256/…``): a leader
    whose run directory lacks the checkpoint (another machine after a failover) restores it from here.
    """

    __tablename__ = "generator_checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    adapter_hash: Mapped[str] = mapped_column(String(128))
    artifact_uri: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Artifact(Base):
    """A content-addressed blob (the database backend of :mod:`curriculum.store.artifacts`)."""

    __tablename__ = "artifacts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


_QUEUE_OPEN = text("state IN ('ready', 'leased')")


class QueueItem(Base):
    """The durable downstream queue (a lease table): one row per emitted task. ``stale``: a ready task
    a refreshed primary probe no longer rates as frontier (never served, kept for analysis).

    ``domain``, ``topic``, ``predicted_in_band`` and ``solver`` are copied from the message so that
    trainers can select on them; the partial ``ix_queue_open_*`` indexes cover a run's open rows in
    enqueue order (the order leases hand them out).
    """

    __tablename__ = "queue"
    __table_args__ = (
        CheckConstraint("state IN ('ready', 'leased', 'acked', 'dead', 'stale')", name="state"),
        UniqueConstraint("run_id", "task_id"),  # a task is queued once per run (another run may replay it)
        Index("ix_queue_state_lease", "state", "lease_until"),
        Index("ix_queue_open_run", "run_id", "enqueued_at", "id", postgresql_where=_QUEUE_OPEN,
              sqlite_where=_QUEUE_OPEN),
        Index("ix_queue_open_run_domain", "run_id", "domain", "enqueued_at", "id", postgresql_where=_QUEUE_OPEN,
              sqlite_where=_QUEUE_OPEN),
        Index("ix_queue_open_run_topic", "run_id", "topic", "enqueued_at", "id", postgresql_where=_QUEUE_OPEN,
              sqlite_where=_QUEUE_OPEN),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    state: Mapped[str] = mapped_column(String(8), default="ready")
    message: Mapped[dict[str, Any]] = mapped_column(default=dict)
    topic: Mapped[str | None] = mapped_column(String(128))
    domain: Mapped[str | None] = mapped_column(String(32))
    predicted_in_band: Mapped[float | None] = mapped_column(Float)
    solver: Mapped[str | None] = mapped_column(String(256))
    explore: Mapped[bool | None] = mapped_column(Boolean)  # served unfiltered: message "explore": true (#36)
    lease_until: Mapped[datetime | None] = mapped_column()
    lease_token: Mapped[str | None] = mapped_column(String(64))
    consumer: Mapped[str | None] = mapped_column(String(128))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    outcome_solved: Mapped[int | None] = mapped_column(Integer)
    outcome_n: Mapped[int | None] = mapped_column(Integer)
    outcome_solver: Mapped[str | None] = mapped_column(String(256))
    enqueued_at: Mapped[datetime] = mapped_column(default=utcnow)
    acked_at: Mapped[datetime | None] = mapped_column()


class MetricPoint(Base):
    """One metric value at one cycle of a run."""

    __tablename__ = "metrics"
    __table_args__ = (
        UniqueConstraint("run_id", "cycle", "name"),
        Index("ix_metrics_run_name_cycle", "run_id", "name", "cycle"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    cycle: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class AlertRow(Base):
    """An alert's lifecycle: fired at a cycle, resolved later (or still open)."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_run_rule", "run_id", "rule"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    rule: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)
    cycle_fired: Mapped[int] = mapped_column(Integer)
    cycle_resolved: Mapped[int | None] = mapped_column(Integer)
    fired_at: Mapped[datetime] = mapped_column(default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column()
    mitigation: Mapped[str | None] = mapped_column(String(64))


class DaemonState(Base):
    """Per-run driver state: phase, counters, heartbeat and the leader lease."""

    __tablename__ = "daemon_state"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    phase: Mapped[str] = mapped_column(String(16), default="rl")
    cycle: Mapped[int] = mapped_column(Integer, default=0)
    counters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    heartbeat_at: Mapped[datetime | None] = mapped_column()
    leader_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
