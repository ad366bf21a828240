"""Tasks from a second generator beside the trained policy (SWE: the agent generator over an endpoint).

Why a lane beside the policy and not the policy itself: the RL phase trains the local generator with
GRPO, and a model behind an HTTP endpoint cannot be trained by it. What the endpoint's agent writes
is still worth what the daemon does to any candidate: the verifier checks it, the probes score it,
spot-checks label it (those labels retrain the probes), emission sends the good ones to trainers.
So the sample phase takes the agent's finished bugs and runs them through the same validity check,
score, store and lineage as the policy's sample, with their own provenance: ``generator_step`` and
``adapter_hash`` empty, ``payload["generator"]`` the agent (``agent:<model>``, also in the emitted
message's ``grading``), ``payload["agent"]`` how the episode ended, and the episode's turns in
``agent_turns`` (role ``generator``). They stay out of the sample's RL metrics (validity, reward
variance, diversity describe the policy) and out of the RL phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from curriculum.domains.base import Task, Validity
from curriculum.store import lineage, repo, trajectories
from curriculum.store.db import Store
from daemon.loop.ports import Engine


class Supplied(Protocol):
    @property
    def completion(self) -> str:
        """What ``Domain.parse`` reads."""

    @property
    def source(self) -> str:
        """The generator's id, e.g. ``agent:MODEL``."""

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The episode's model turns (content, tool_calls, tool_results)."""

    @property
    def meta(self) -> dict[str, Any]:
        """How the episode went (stop_reason, steps, seconds)."""


class TaskSupply(Protocol):
    def take(self, seed: int) -> Sequence[Supplied]:
        """What has finished since the last call (never waits for a model)."""
        ...

    def close(self) -> None:
        ...


def store_supplied(store: Store, run_id: int, engine: Engine, cycle: int, items: Sequence[Supplied]
                   ) -> dict[str, float]:
    """Validate, score and store ``items`` as tasks of ``cycle``, with their turns; returns metrics."""
    if not items:
        return {"supplied": 0.0}
    raw = engine.domain.validate_batch([b.completion for b in items])
    checks = [Validity(v.valid, v.reason, Task(v.task.domain, v.task.text, {
        **v.task.payload, "generator": b.source, "agent": dict(b.meta)})) for v, b in zip(raw, items, strict=True)]
    valid_idx = [i for i, v in enumerate(checks) if v.valid]
    scored = engine.score([engine.domain.reference_text(checks[i].task) for i in valid_idx]) if valid_idx else None
    new = [repo.NewTask(domain=v.task.domain, content_hash=v.task.content_hash, text=v.task.text, valid=v.valid,
                        payload=v.task.payload, invalid_reason=v.reason,
                        topic=engine.domain.topic(v.task) if v.valid else None, cycle=cycle)
           for v in checks]
    with store.session() as s:
        ids = repo.add_tasks(s, run_id, new)
        if scored is not None:
            ensemble_id = lineage.record_ensemble(s, run_id, scored.ensemble)
            lineage.record_probe_scores(s, ensemble_id, [(ids[i], lg, p) for i, lg, p in
                                                         zip(valid_idx, scored.logits, scored.probabilities,
                                                             strict=True)])
        for task_id, item in zip(ids, items, strict=True):
            trajectories.add_turns(s, task_id, "generator", item.source, 0, item.turns)
    return {"supplied": float(len(items)), "supplied_valid": float(len(valid_idx))}
