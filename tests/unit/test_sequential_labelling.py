"""Sequential labelling in memory (the first probe's corpus, active labelling): the product's
``label_tasks`` / ``label_corpus`` with ``sequential=True`` give the labels of full-``k`` labelling for the
same attempt outcomes, with fewer attempts, and count the attempts they ran."""

from __future__ import annotations

import random

import pytest

from curriculum.common.solver_api import Sampling, attempt_runner
from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.domains.base import Task
from curriculum.labelling.spotcheck import label_tasks
from curriculum.probing.first_probe import label_corpus
from curriculum.solvers import DelayedSolver, build_solver
from curriculum.solvers.synthetic import SyntheticArithSolver
from probes.band import Band
from testkit.flaky_solver import BatchedOnly, FlakySolver

BANDS = [Band(8, 1, 3, 1), Band(8, 1, 3, 6), Band(3, 1, 2, 2), Band(1, 1, 1, 1)]


def _tasks(n: int, seed: int = 0) -> list[Task]:
    dom, rng, out = ArithDomain(), random.Random(seed), {}
    while len(out) < n:
        v = dom.check(dom.parse(random_expression(rng, rng.randint(1, 9))).task)  # type: ignore[arg-type]
        if v.valid:
            out[v.task.content_hash] = v.task
    return list(out.values())


@pytest.mark.parametrize("band", BANDS, ids=lambda b: f"k{b.k}-{b.lo}-{b.hi}-min{b.min_valid_trials}")
@pytest.mark.parametrize("null_share", [0.0, 0.3])
def test_sequential_labels_equal_full_k_labels_with_fewer_attempts(band: Band, null_share: float) -> None:
    tasks, sampling = _tasks(120), Sampling(seed=5)
    full_solver = FlakySolver(SyntheticArithSolver(seed=1), null_share)
    seq_solver = FlakySolver(SyntheticArithSolver(seed=1), null_share)
    full = label_tasks(ArithDomain(), full_solver, tasks, band, sampling, chunk=32)
    seq = label_tasks(ArithDomain(), seq_solver, tasks, band, sampling, chunk=32, sequential=True)
    assert [(lab.in_band, lab.side(band)) for lab in seq] == [(lab.in_band, lab.side(band)) for lab in full]
    assert all(lab.attempts == band.k for lab in full) and full_solver.attempts_run == len(tasks) * band.k
    assert all(1 <= (lab.attempts or 0) <= band.k for lab in seq)
    assert sum(lab.attempts or 0 for lab in seq) == seq_solver.attempts_run  # every attempt run is counted
    if band.k > 1:
        assert seq_solver.attempts_run < full_solver.attempts_run
    if null_share and band.min_valid_trials > 1:
        assert any(lab.in_band is None for lab in seq)  # too few valid trials: the same "no label" as full-k


def test_a_batched_backend_runs_all_k_even_when_sequential() -> None:
    tasks, band = _tasks(20), Band(8, 1, 3, 1)
    solver = BatchedOnly(SyntheticArithSolver(seed=1))
    assert attempt_runner(solver) is None
    labels = label_tasks(ArithDomain(), solver, tasks, band, Sampling(seed=5), sequential=True)
    assert all(lab.attempts == band.k for lab in labels)


def test_the_corpus_counts_the_attempts_it_ran() -> None:
    tasks, band = _tasks(96), Band(8, 1, 3, 6)
    full = label_corpus(ArithDomain(), SyntheticArithSolver(seed=0), tasks, band, Sampling(seed=1))
    seq = label_corpus(ArithDomain(), SyntheticArithSolver(seed=0), tasks, band, Sampling(seed=1), sequential=True)
    assert [t.content_hash for t in seq.tasks] == [t.content_hash for t in full.tasks]
    assert seq.y.tolist() == full.y.tolist()
    assert full.solver_trials == len(tasks) * band.k
    assert seq.solver_trials == sum(lab.attempts or 0 for lab in seq.labels) < full.solver_trials


def test_backends_offer_single_attempts_only_where_attempts_are_separate_runs() -> None:
    synthetic = build_solver("synthetic", seed=0)
    assert attempt_runner(synthetic) is not None
    assert attempt_runner(DelayedSolver(synthetic, 0.001)) is not None
    assert attempt_runner(DelayedSolver(BatchedOnly(synthetic), 0.001)) is None
    assert attempt_runner(build_solver("openai", base_url="http://127.0.0.1:9/v1", model="m")) is None
    prompts = [ArithDomain().solver_prompt(t) for t in _tasks(3)]
    rows = synthetic.generate(prompts, 4, Sampling(seed=2))
    runner = attempt_runner(synthetic)
    assert runner is not None
    singles = runner(prompts * 4, [a for a in range(4) for _ in prompts], Sampling(seed=2))
    assert [c.text for c in singles] == [rows[p][a].text for a in range(4) for p in range(len(prompts))]
