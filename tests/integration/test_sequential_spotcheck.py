"""Sequential spot-checks against the real store, called the way the daemon calls them: the embedded
spot-checker (``InProcessSpotChecker``, built with ``spotcheck.sequential``'s band) and the Celery task
body (``workers.tasks.spotcheck_task`` with the band its message carries), then the driver's harvest rule.

The same tasks checked full-``k`` under another solver name give the reference: every label (in band,
side) is identical, fewer trial rows are written, and each stored label counts the attempts behind it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.labelling.spotcheck import LabelValue, harvest_labels, run_spotcheck
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import Label, SolverTrial
from daemon.service.spot import InProcessSpotChecker
from probes.band import Band
from testkit.flaky_solver import FlakySolver

pytestmark = pytest.mark.integration
BAND = Band(8, 1, 3, 6)


def _run(store: Store) -> int:
    """The run the labels belong to (labels are per run; these tasks belong to none)."""
    with store.session() as s:
        return repo.get_or_create_run(s, "spotcheck-labels", "h", {})


def _tasks(store: Store, n: int = 40) -> list[int]:
    dom, rng, new = ArithDomain(), random.Random(3), {}
    while len(new) < n:
        v = dom.check(dom.parse(random_expression(rng, rng.randint(1, 9))).task)  # type: ignore[arg-type]
        if v.valid:
            new[v.task.content_hash] = repo.NewTask("arith", v.task.content_hash, v.task.text, True, v.task.payload)
    with store.session() as s:
        return repo.add_tasks(s, None, list(new.values()))


def _trials(store: Store, solver_id: str) -> int:
    with store.session() as s:
        return int(s.execute(select(func.count()).select_from(SolverTrial)
                             .where(SolverTrial.solver_id == solver_id)).scalar_one())


def _sides(labels: dict[int, LabelValue]) -> dict[int, tuple[bool | None, str | None]]:
    return {t: (lab.in_band, lab.side(BAND)) for t, lab in labels.items()}


def _flaky() -> FlakySolver:
    return FlakySolver(SyntheticArithSolver(seed=4), null_share=0.15, seed=1)


def test_embedded_sequential_spotchecks_give_the_full_k_labels_with_fewer_trials(store: Store) -> None:
    ids = _tasks(store)
    full = InProcessSpotChecker(store, ArithDomain(), _flaky(), Sampling(seed=2), solver_name="full")
    seq = InProcessSpotChecker(store, ArithDomain(), _flaky(), Sampling(seed=2), solver_name="seq", settle=BAND)
    full.dispatch(ids, BAND.k)
    seq.dispatch(ids, BAND.k)
    want = harvest_labels(store, ids, "full", BAND, run_id=_run(store))
    got = harvest_labels(store, ids, "seq", BAND, run_id=_run(store), sequential=True)
    assert set(want) == set(got) == set(ids) and _sides(got) == _sides(want)
    assert any(lab.in_band is None for lab in want.values())  # the nulls leave some tasks without a verdict, alike
    assert _trials(store, "full") == len(ids) * BAND.k == full.trials_written
    spent = sum(lab.attempts or 0 for lab in got.values())
    assert _trials(store, "seq") == seq.trials_written == spent < len(ids) * BAND.k
    with store.session() as s:  # a stored label's k is the attempts behind it
        rows = dict(s.execute(select(Label.task_id, Label.k).where(Label.solver_id == "seq")).all())
    assert rows == {t: lab.attempts for t, lab in got.items()} and min(rows.values()) < BAND.k
    assert harvest_labels(store, ids, "seq", BAND, run_id=_run(store)) != got  # the full-k rule waits for all k trials


class _KilledAfter:
    """The worker dies after ``rounds`` rounds of single attempts (a SIGKILL mid-message)."""

    def __init__(self, inner: FlakySolver, rounds: int) -> None:
        self.inner, self.rounds, self.solver_id = inner, rounds, inner.solver_id

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        return self.inner.generate(prompts, n, sampling)

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        if self.rounds == 0:
            raise SystemExit("worker killed")
        self.rounds -= 1
        return self.inner.generate_attempts(prompts, attempts, sampling)


def test_a_redelivered_sequential_message_resumes_and_labels_the_same(sqlite_store: Store) -> None:
    ids = _tasks(sqlite_store, 24)
    with pytest.raises(SystemExit):
        run_spotcheck(sqlite_store, ArithDomain(), _KilledAfter(_flaky(), 5), ids, BAND.k, Sampling(seed=2),
                      solver_id="seq", settle=BAND)
    partial = _trials(sqlite_store, "seq")
    again = run_spotcheck(sqlite_store, ArithDomain(), _flaky(), ids, BAND.k, Sampling(seed=2), solver_id="seq",
                          settle=BAND)
    assert partial == 5 * len(ids)  # six attempts are needed before any task with min_valid_trials = 6 settles
    run_spotcheck(sqlite_store, ArithDomain(), _flaky(), ids, BAND.k, Sampling(seed=2), solver_id="full")
    got = harvest_labels(sqlite_store, ids, "seq", BAND, run_id=_run(sqlite_store), sequential=True)
    assert _sides(got) == _sides(harvest_labels(sqlite_store, ids, "full", BAND, run_id=_run(sqlite_store)))
    assert again.trials_written == _trials(sqlite_store, "seq") - partial and again.settled_early > 0
    assert run_spotcheck(sqlite_store, ArithDomain(), _flaky(), ids, BAND.k, Sampling(seed=2), solver_id="seq",
                         settle=BAND).trials_written == 0  # settled tasks are not attempted again


def test_the_celery_task_stops_at_the_band_its_message_carries(tmp_path: Path) -> None:
    from migrations import upgrade
    from workers import runtime
    from workers.tasks import spotcheck_task, spotcheck_task_id

    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(url)
    store = Store(url)
    try:
        ids = _tasks(store, 24)
        runtime.configure(runtime.WorkerSettings(database_url=url, broker_url="memory://", domain="arith",
                                                 solver={"backend": "synthetic", "seed": 4}, sampling={"seed": 2}))
        full = spotcheck_task(ids, BAND.k, "full")  # an older leader's message: no band, all k
        seq = spotcheck_task(ids, BAND.k, "seq", [BAND.lo, BAND.hi, BAND.min_valid_trials])
        assert full["trials_written"] == len(ids) * BAND.k and full["settled_early"] == 0
        assert seq["trials_written"] < full["trials_written"] and seq["settled_early"] > 0
        got = harvest_labels(store, ids, "seq", BAND, run_id=_run(store), sequential=True)
        full = harvest_labels(store, ids, "full", BAND, run_id=_run(store))
        assert _sides(got) == _sides(full) and len(got) == len(ids)
        assert spotcheck_task_id(ids, 8, "s") != spotcheck_task_id(ids, 8, "s", [1, 3, 6])  # a distinct message
    finally:
        runtime.configure(None)  # type: ignore[arg-type]
        store.dispose()


class _Overtaken:
    """A worker whose solver always answers wrong, and whose first round is overtaken: while it runs,
    ``first`` (another worker with the same message: a redelivery) settles the same check."""

    def __init__(self, first: Callable[[], None]) -> None:
        self.first: Callable[[], None] | None = first
        self.solver_id = "wrong"
        self.attempts_run = 0

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        return [[Completion("-987654321")] * n for _ in prompts]

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        if self.first is not None:
            first, self.first = self.first, None
            first()
        self.attempts_run += len(prompts)
        return [Completion("-987654321") for _ in prompts]


def test_two_workers_settling_the_same_check_store_one_workers_label(store: Store) -> None:
    """Two workers run the same sequential check; the one overtaken writes nothing of its own and stops where
    the stored trials settle (before #37 it went on from its own outcomes, writing attempts past the settled
    ones), and the label is the one a single worker gives."""
    ids = _tasks(store, 16)
    run_spotcheck(store, ArithDomain(), _flaky(), ids, BAND.k, Sampling(seed=2), solver_id="alone", settle=BAND)

    def first() -> None:
        run_spotcheck(store, ArithDomain(), _flaky(), ids, BAND.k, Sampling(seed=2), solver_id="race", settle=BAND)

    second = _Overtaken(first)
    out = run_spotcheck(store, ArithDomain(), second, ids, BAND.k, Sampling(seed=2), solver_id="race", settle=BAND)
    assert out.trials_written == 0 and second.attempts_run == len(ids)  # one round, all of it overtaken
    assert _trials(store, "race") == _trials(store, "alone")
    run = _run(store)
    alone = harvest_labels(store, ids, "alone", BAND, run_id=run, sequential=True)
    raced = harvest_labels(store, ids, "race", BAND, run_id=run, sequential=True)
    assert raced == alone and len(raced) == len(ids)
