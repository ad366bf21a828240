"""A trainer's outcome as the API takes it: the request models of the single and the batched ack,
and the per-item validation of a batch (one bad item is refused alone, never the whole batch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from curriculum.store import queue, solver_versions
from daemon.http.fields import Text, VersionText

LeaseTokenField = Field(min_length=1, max_length=64, description="the lease_token from the lease answer (required)")


class SamplingSettings(BaseModel):
    """The trainer's sampling settings for its attempts (recorded with the label when given)."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(default=None, ge=0, le=100)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class AckRequest(BaseModel):
    """A trainer's outcome for one task. The single definition of an outcome: the batched ack reuses it.

    ``solver`` is a name with ``version`` given separately, or (older trainers) ``name@version``; the
    stored id ``name@version`` is at most :data:`~curriculum.store.solver_versions.SOLVER_ID_MAX` characters.
    ``errors`` are attempts that failed for infrastructure reasons: excluded from the count.
    """

    model_config = ConfigDict(extra="forbid")
    solved: int = Field(ge=0, le=10_000, description="attempts of the trainer's solver that solved the task")
    n: int = Field(ge=1, le=10_000, description="attempts made")
    errors: int = Field(default=0, ge=0, le=10_000, description="attempts lost to infrastructure failures "
                        "(timeouts, server errors): excluded from the count, never counted as failures")
    solver: Text = Field(min_length=1, max_length=256,
                         description="solver name (or name@version when version is not given); name@version "
                                     f"at most {solver_versions.SOLVER_ID_MAX} characters")
    version: VersionText | None = Field(default=None, description="the solver version that made the attempts "
                                        "(a checkpoint step such as 1200 or step-1200, or an announced string)")
    version_order: int | None = Field(default=None, ge=0, le=2**53, description="order of a version string "
                                      "with no step number (higher = newer); not needed once it was announced")
    sampling: SamplingSettings | None = Field(default=None, description="the trainer's sampling settings")
    lease_token: Text = LeaseTokenField

    @model_validator(mode="after")
    def _counts(self) -> AckRequest:
        if self.errors > self.n:
            raise ValueError(f"errors ({self.errors}) cannot exceed n ({self.n})")
        if self.solved + self.errors > self.n:
            raise ValueError(f"solved + errors ({self.solved} + {self.errors}) cannot exceed n ({self.n})")
        if self.version is not None and "@" in self.solver:
            raise ValueError("solver must be a bare name (no '@') when version is given")
        if self.version is None and self.version_order is not None:
            raise ValueError("version_order needs version")
        problem = solver_versions.solver_id_problem(*self.solver_version())
        if problem:
            raise ValueError(problem)
        return self

    def solver_version(self) -> tuple[str, str]:
        """(name, version) of the solver that made the attempts."""
        if self.version is not None:
            return self.solver, self.version
        return solver_versions.split_solver_id(self.solver)

    def outcome(self, task_id: int) -> queue.Outcome:
        """The queue's view of this outcome."""
        return queue.Outcome(task_id, self.lease_token, self.solved, self.n,
                             solver_versions.qualified_id(*self.solver_version()), self.errors)


class AckItem(AckRequest):
    """One outcome of a batched ack: the task id plus the fields of a single ack."""

    id: int = Field(ge=1, le=2**31 - 1, description="task id from the leased message")


class AckBatchRequest(BaseModel):
    """Up to ``MAX_BATCH`` outcomes, each an :class:`AckItem`. Items are validated one by one: an
    invalid item (or a task id repeated in the batch) gets its own ``invalid`` result, the rest are
    acked."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lambda schema: _document_items(schema))
    outcomes: list[Any] = Field(min_length=1, max_length=queue.MAX_BATCH)


def _document_items(schema: dict[str, Any]) -> None:
    """The OpenAPI schema shows each item as an :class:`AckItem` (it is validated as one, item by item)."""
    item = AckItem.model_json_schema(ref_template="#/components/schemas/{model}")
    item.pop("$defs", None)
    schema["properties"]["outcomes"]["items"] = item


@dataclass(frozen=True)
class ItemResult:
    """The answer for one item of a batch: its task id (None when the item has no valid id), status,
    and for an ``invalid`` item why (one line naming the field and the fix)."""

    id: int | None
    status: queue.AckStatus
    detail: str | None = None

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "status": self.status.value}
        if self.detail is not None:
            out["detail"] = self.detail
        return out


def parse_items(raw: list[Any]) -> tuple[list[AckItem], dict[int, ItemResult]]:
    """The valid items of a batch, and an ``invalid`` result per position of every other one."""
    valid: list[AckItem] = []
    refused: dict[int, ItemResult] = {}
    first: dict[int, int] = {}
    for i, item in enumerate(raw):
        given = item.get("id") if isinstance(item, dict) else None
        tid = given if isinstance(given, int) and not isinstance(given, bool) else None
        try:
            parsed = AckItem.model_validate(item)
        except ValidationError as err:
            refused[i] = ItemResult(tid, queue.AckStatus.INVALID, f"outcomes[{i}]: {_first_error(err)}")
            continue
        if parsed.id in first:
            refused[i] = ItemResult(parsed.id, queue.AckStatus.INVALID, f"outcomes[{i}]: task {parsed.id} appears "
                                    f"again (first at outcomes[{first[parsed.id]}]): send each task once per batch")
            continue
        first[parsed.id] = i
        valid.append(parsed)
    return valid, refused


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    where = ".".join(str(p) for p in e.get("loc", ())) or "item"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    msg = str(e.get("msg", "")).removeprefix("Value error, ")
    return f"{where}: {msg}{more}"
