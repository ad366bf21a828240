"""The frontier message the emit phase writes to the queue (:class:`propel_sdk.schema.FrontierTask`)."""

from __future__ import annotations

from typing import Any, Protocol

from curriculum.domains.base import Domain, Task
from probes.band import Band
from propel_sdk.schema import FrontierTask, Provenance, SpotCheck


class _Settings(Protocol):
    @property
    def band(self) -> Band: ...
    @property
    def reference_model(self) -> str: ...
    @property
    def run_name(self) -> str: ...


def frontier_message(r: Any, prov: dict[str, Any], s: _Settings, domain: Domain, solver: str) -> dict[str, Any]:
    """The message of an emission row ``r`` (task, probability, ensemble key, spot-check label) for ``solver``'s
    frontier; its ensemble is the one whose score it carries, not the one loaded now."""
    task = r.TaskRow
    check = None if r.in_band is None and r.solved is None else SpotCheck(
        solver=r.solver_id, solved=r.solved, valid_trials=r.valid_trials, k=s.band.k, in_band=r.in_band)
    dom_task = Task(task.domain, task.text, dict(task.payload))
    msg = FrontierTask(
        id=task.id, domain=task.domain, solver_prompt=domain.solver_prompt(dom_task),
        grading=dict(task.payload), predicted_in_band=float(r.probability), spot_check=check, topic=task.topic,
        solver=solver, band=(s.band.lo, s.band.hi), k=s.band.k, created_at=task.created_at,
        provenance=Provenance(generator_step=task.generator_step, adapter_hash=task.adapter_hash,
                              probe_ensemble_id=r.ensemble_key, reference_model=s.reference_model,
                              reference_fingerprint=prov.get("reference_fingerprint"), run=s.run_name))
    return msg.model_dump(mode="json")
