"""Frontier-task messages built the way the daemon builds them (tests of trainer-side code)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from curriculum.domains.base import Domain, Task
from propel_sdk.schema import FrontierTask, Provenance


def frontier_message(domain: Domain, task: Task, task_id: int = 1, topic: str | None = None) -> dict[str, Any]:
    """The JSON message a trainer leases for a checked ``task`` (as ``daemon.loop.driver`` builds it:
    the solver prompt from the domain, ``grading`` = the task payload), round-tripped through JSON."""
    msg = FrontierTask(
        id=task_id, domain=task.domain, solver_prompt=domain.solver_prompt(task), grading=dict(task.payload),
        predicted_in_band=0.5, spot_check=None, topic=topic, solver="test-solver", band=(1, 3), k=8,
        created_at=datetime.now(UTC),
        provenance=Provenance(generator_step=0, adapter_hash=None, probe_ensemble_id=None,
                              reference_model="test/ref", run="test"))
    out: dict[str, Any] = orjson.loads(orjson.dumps(msg.model_dump(mode="json")))
    return out
