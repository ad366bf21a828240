"""Spot-check dispatchers: in-process (embedded mode) or Celery (distributed mode).

Both run the same plain function, :func:`curriculum.labelling.spotcheck.run_spotcheck`; a dispatch that
cannot reach the broker raises :class:`~daemon.loop.ports.DispatchError` and the driver retries it next cycle (the
Celery task ids are deterministic and the trials idempotent, so a retry never duplicates rows).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import Domain
from curriculum.labelling.spotcheck import run_spotcheck
from curriculum.store.db import Store
from daemon.loop.ports import DispatchError
from probes.band import Band

log = logging.getLogger("propel.spot")


def settle_for(settle: Band | None, k: int) -> Band | None:
    """The band a dispatch of ``k`` attempts stops at: the run's (``spotcheck.sequential``) when it is a
    dispatch of the band's ``k`` (the driver's); a dispatch of another ``k`` runs all of them."""
    return settle if settle is not None and settle.k == k else None


class InProcessSpotChecker:
    """Embedded mode: attempts happen now, in this process. ``solver_name`` (default: the backend's id)
    is the name trainers ack and announce the solver under."""

    def __init__(self, store: Store, domain: Domain, solver: SolverBackend, sampling: Sampling,
                 solver_name: str | None = None, settle: Band | None = None) -> None:
        self.store, self.domain, self.solver, self.sampling = store, domain, solver, sampling
        self.solver_id = solver_name or solver.solver_id
        self.settle = settle  # spotcheck.sequential: stop a task's attempts once its label is settled
        self.trials_written = 0

    def dispatch(self, task_ids: Sequence[int], k: int, solver_id: str | None = None) -> None:
        res = run_spotcheck(self.store, self.domain, self.solver, task_ids, k, self.sampling,
                            solver_id=solver_id or self.solver_id, settle=settle_for(self.settle, k))
        self.trials_written += res.trials_written


class CelerySpotChecker:
    """Distributed mode: batches go to the run's Celery queue; results land in the store."""

    def __init__(self, solver_id: str, run_name: str, batch_size: int, settle: Band | None = None) -> None:
        self.solver_id, self.run_name, self.batch_size = solver_id, run_name, batch_size
        self.settle = settle  # carried in each message: the worker stops a task once its label is settled

    def dispatch(self, task_ids: Sequence[int], k: int, solver_id: str | None = None) -> None:
        from kombu.exceptions import OperationalError

        from workers.tasks import dispatch_spotchecks

        try:
            dispatch_spotchecks(task_ids, k, solver_id or self.solver_id, self.run_name, self.batch_size,
                                settle=settle_for(self.settle, k))
        except (OperationalError, ConnectionError, OSError) as err:
            raise DispatchError(f"broker unreachable, {len(task_ids)} spot-checks deferred: {err}") from err
