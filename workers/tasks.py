"""Celery tasks: thin wrappers over plain functions in ``curriculum`` (the embedded mode calls the
same functions in-process)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from curriculum.labelling.spotcheck import run_spotcheck
from curriculum.probing.retrain import RetrainSpec, carry_out
from probes.band import Band
from workers.app import app, queue_name
from workers.runtime import resources


@app.task(name="propel.spotcheck")
def spotcheck_task(task_ids: list[int], k: int, solver_id: str | None = None,
                   settle: list[int] | None = None) -> dict[str, Any]:
    """Attempt each task until it has ``k`` trials by this worker's solver (idempotent).

    ``solver_id`` is the qualified ``name@version`` the leader read from the store when it dispatched
    (the version the endpoint serves now: an announce changes it without restarting anything); the
    trials are recorded under it. Messages without it (older leaders) use the backend's id. A message whose
    version was superseded by an announce before (or while) it ran is refused (``refused`` says why): the
    endpoint serves the newer checkpoint, and the leader sends the check again under that version.
    ``settle`` (``[lo, hi, min_valid_trials]`` of the leader's band; ``spotcheck.sequential``): stop a
    task's attempts once its label is settled. Messages without it run all ``k``.
    """
    res = resources()
    band = None if settle is None else Band(k, *settle)
    out = run_spotcheck(res.store, res.domain, res.solver, task_ids, k, res.sampling, solver_id=solver_id,
                        settle=band)
    return {"tasks": out.tasks, "trials_written": out.trials_written, "null_trials": out.null_trials,
            "settled_early": out.settled_early, "elapsed_s": round(out.elapsed_s, 3), "refused": out.refused}


def spotcheck_task_id(task_ids: Sequence[int], k: int, solver_id: str, settle: Sequence[int] | None = None) -> str:
    """Deterministic Celery task id from the batch content (same batch → same id)."""
    content: dict[str, Any] = {"t": sorted(task_ids), "k": k, "s": solver_id}
    if settle is not None:
        content["b"] = list(settle)
    key = json.dumps(content, separators=(",", ":"))
    return "spotcheck-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def dispatch_spotchecks(task_ids: Sequence[int], k: int, solver_id: str, run_name: str,
                        batch_size: int = 8, settle: Band | None = None) -> list[str]:
    """Send ``task_ids`` to the run's spot-check queue in batches; returns the Celery task ids.

    The message carries ``solver_id`` (qualified ``name@version``); the worker records its trials under it.
    With ``settle`` (``spotcheck.sequential``; ``settle.k`` must be ``k``) it also carries that band's
    ``[lo, hi, min_valid_trials]``: the worker stops a task once its label is settled.
    """
    if settle is not None and settle.k != k:
        raise ValueError(f"settle band has k={settle.k}, the spot-checks ask for k={k}")
    band = None if settle is None else [settle.lo, settle.hi, settle.min_valid_trials]
    ids = []
    for i in range(0, len(task_ids), batch_size):
        batch = list(task_ids[i:i + batch_size])
        tid = spotcheck_task_id(batch, k, solver_id, band)
        args: list[Any] = [batch, k, solver_id] if band is None else [batch, k, solver_id, band]
        spotcheck_task.apply_async(args=args, task_id=tid, queue=queue_name(run_name))
        ids.append(tid)
    return ids


@app.task(name="propel.retrain")
def retrain_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the aux probe of a pending retrain job; the outcome (or the error) goes to the job's row."""
    job = RetrainSpec.from_json(spec)
    res = resources()
    out = carry_out(res.store, job, res.domain, res.extractor, lambda: res.artifacts)
    return {"name": out.name, "state": out.state, "probe_id": out.probe_id, "reason": out.reason}


def dispatch_retrain(spec: dict[str, Any], run_name: str) -> str:
    """Send a retrain job to the run's ``retrain`` queue; the Celery task id is the job name."""
    tid = f"retrain-{spec['name']}"
    retrain_task.apply_async(args=[spec], task_id=tid, queue=queue_name(run_name, "retrain"))
    return tid
