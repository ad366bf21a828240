"""PostgreSQL restarted (clean ``fast`` stop and crash-like ``immediate`` stop) in the middle of
store writes: the same :class:`Store` reconnects, the interrupted transaction is retried, and no
partial or duplicated rows remain — every task has all of its trials or none.

Runs against a PRIVATE cluster (``initdb`` into a temp dir on its own port), never the shared one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain
from curriculum.labelling.spotcheck import run_spotcheck
from curriculum.solvers import build_solver
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial, TaskRow
from tests.e2e.faults._private import PrivatePostgres, private_postgres
from tests.integration.test_celery_spotcheck import N_TASKS, K, _count, _tasks

pytestmark = [pytest.mark.integration, pytest.mark.slow]
UNITS = 150
DOWN_S = 2.0


def retrying(fn: Callable[[], object], errors: list[str], timeout_s: float = 60) -> None:
    """Run one transaction, retrying on connection errors (what the driver does next tick)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fn()
            return
        except DBAPIError as err:
            if time.monotonic() > deadline:
                raise
            errors.append(type(err.orig).__name__ if err.orig is not None else type(err).__name__)
            time.sleep(0.2)


def restart_when(pg: PrivatePostgres, ready: threading.Event, mode: str, done: threading.Event) -> None:
    ready.wait(60)
    pg.stop(mode)
    time.sleep(DOWN_S)
    pg.start()
    done.set()


def _unit(store: Store, i: int) -> None:
    """One task and its K trials in ONE transaction (so either all rows land or none)."""
    with store.session() as s:
        [tid] = repo.add_tasks(s, None, [repo.NewTask("arith", f"h{i}", f"{i}+1", True, {"answer": i + 1})])
        repo.add_trials(s, [repo.NewTrial(tid, "synthetic:fault", a, "pass" if (i + a) % 3 else "fail")
                            for a in range(K)])


def _partial_tasks(store: Store) -> int:
    """Tasks whose trial count is neither 0 nor K."""
    with store.session() as s:
        per_task = (select(TaskRow.id, func.count(SolverTrial.id).label("n"))
                    .outerjoin(SolverTrial, SolverTrial.task_id == TaskRow.id).group_by(TaskRow.id).subquery())
        return int(s.execute(select(func.count()).select_from(per_task).where(per_task.c.n.notin_([0, K])))
                   .scalar_one())


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_repo_writes_survive_a_restart(mode: str) -> None:
    with private_postgres() as pg:
        store = Store(pg.url)
        ready, restarted = threading.Event(), threading.Event()
        errors: list[str] = []
        killer = threading.Thread(target=restart_when, args=(pg, ready, mode, restarted), daemon=True)
        killer.start()
        try:
            for i in range(UNITS):
                if i == UNITS // 3:
                    ready.set()
                    time.sleep(0.3)  # let the stop land while the loop keeps writing
                retrying(partial(_unit, store, i), errors)
            killer.join(timeout=60)
            with store.session() as s:
                tasks = s.execute(select(func.count()).select_from(TaskRow)).scalar_one()
            total, distinct = _count(store)
            incomplete = _partial_tasks(store)
        finally:
            ready.set()
            killer.join(timeout=60)
            store.dispose()
    assert restarted.is_set()
    assert errors, "the restart never interrupted a write: the test did not exercise anything"
    assert tasks == UNITS and total == distinct == UNITS * K
    assert incomplete == 0


def test_spotcheck_pipeline_survives_a_restart() -> None:
    with private_postgres() as pg:
        store = Store(pg.url)
        ids = _tasks(store)
        solver = build_solver("synthetic", seed=3, artificial_latency_s=0.02)
        ready, restarted = threading.Event(), threading.Event()
        errors: list[str] = []
        killer = threading.Thread(target=restart_when, args=(pg, ready, "immediate", restarted), daemon=True)
        killer.start()
        try:
            for b in range(0, N_TASKS, 5):
                if b == 15:
                    ready.set()
                    time.sleep(0.3)
                batch = ids[b:b + 5]
                retrying(partial(run_spotcheck, store, ArithDomain(), solver, batch, K, Sampling()), errors)
            killer.join(timeout=60)
            # a re-run over everything (a redelivered message, a restarted daemon) adds nothing
            again = run_spotcheck(store, ArithDomain(), solver, ids, K, Sampling())
            total, distinct = _count(store)
            incomplete = _partial_tasks(store)
        finally:
            ready.set()
            killer.join(timeout=60)
            store.dispose()
    assert restarted.is_set() and errors
    assert again.trials_written == 0
    assert total == distinct == N_TASKS * K and incomplete == 0
