"""The frontier-task message that solver trainers consume (JSON, versioned).

Bump ``SCHEMA_VERSION`` on any incompatible change. The SDK checks it on every leased message
(:func:`check_schema_version`) and refuses a version it does not know with
:class:`SchemaVersionError`, so an old trainer fails loudly instead of misreading a newer message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
#: the message versions this SDK reads
SUPPORTED_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})


class SchemaVersionError(ValueError):
    """A message's ``schema_version`` is one this SDK cannot read (the text says what to do)."""

    def __init__(self, version: object, task_id: object = None) -> None:
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))
        if isinstance(version, int) and not isinstance(version, bool) and version > max(SUPPORTED_SCHEMA_VERSIONS):
            text = (f"message schema_version {version} is newer than this SDK (supports {supported}): "
                    "upgrade propel-curriculum")
        else:
            text = f"message schema_version {version!r} is not one this SDK reads (supports {supported})"
        super().__init__(text if task_id is None else f"task {task_id}: {text}")
        self.version = version


def check_schema_version(message: Mapping[str, Any]) -> None:
    """Raise :class:`SchemaVersionError` unless ``message`` has a ``schema_version`` this SDK reads.
    A message without the field is version 1 (the model's default; every later version writes it)."""
    version = message.get("schema_version", 1)
    if version not in SUPPORTED_SCHEMA_VERSIONS or isinstance(version, bool):
        raise SchemaVersionError(version, message.get("id"))


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True)

    generator_step: int | None = Field(description="global RL step of the generator that wrote the task")
    adapter_hash: str | None = Field(description="sha256 of the LoRA adapter weights")
    probe_ensemble_id: str | None = Field(description="id of the probe ensemble that scored the task")
    reference_model: str = Field(description="frozen reference model id the probes read")
    reference_fingerprint: str | None = None
    run: str


class SpotCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    solver: str
    solved: int
    valid_trials: int
    k: int
    in_band: bool | None


class FrontierTask(BaseModel):
    """One frontier task as delivered by ``/v1/tasks/lease``, ``propel tasks pull`` and the client."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = SCHEMA_VERSION
    id: int = Field(description="task id; use it to ack/nack")
    domain: str
    solver_prompt: str = Field(description="the prompt to give the solver being trained")
    grading: dict[str, Any] = Field(description="what grading needs (domain-specific: answer, hidden tests …)")
    predicted_in_band: float = Field(ge=0, le=1, description="probe ensemble's probability of being in band")
    spot_check: SpotCheck | None = Field(description="real solver label, when the task was spot-checked")
    solver: str | None = Field(default=None, description="the solver whose frontier the task was selected for "
                               "(lease requests may ask for one solver)")
    topic: str | None
    band: tuple[int, int] = Field(description="target band [lo, hi] of solves out of k")
    k: int
    provenance: Provenance
    created_at: datetime


class TaskRecord(FrontierTask):
    """One line of ``propel tasks import`` / ``export``: a :class:`FrontierTask` message plus the
    generator's ``text``. ``id`` is optional and ignored on import (the store assigns its own);
    ``domain`` + ``text`` (``solver_prompt`` when there is no text) is the deduplication key.
    Unknown fields (an export's ``queue`` block) are ignored."""

    id: int | None = Field(default=None, description="ignored on import")  # type: ignore[assignment]
    text: str | None = Field(default=None, max_length=100_000, description="the generator's task text")
    domain: str = Field(min_length=1, max_length=32)
    topic: str | None = Field(max_length=128)


def parse_message(message: Mapping[str, Any]) -> FrontierTask:
    """The typed :class:`FrontierTask` of a message dict, after the schema-version check
    (:class:`SchemaVersionError`; a malformed message of a known version raises pydantic's
    ``ValidationError``)."""
    check_schema_version(message)
    return FrontierTask.model_validate(message)
