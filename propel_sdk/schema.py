"""The frontier-task message that solver trainers consume (JSON, versioned).

Bump ``SCHEMA_VERSION`` on any incompatible change; consumers should check it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


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
