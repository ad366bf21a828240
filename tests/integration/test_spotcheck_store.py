"""The spot-check pipeline against the real store (SQLite and PostgreSQL) with a scripted solver."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.arith import ArithDomain
from curriculum.labelling.spotcheck import false_positives, harvest_labels, run_spotcheck
from curriculum.solvers import build_solver
from curriculum.store import lineage, repo, solver_versions
from curriculum.store.db import Store
from curriculum.store.models import FalsePositive, Label, SolverTrial
from probes.band import Band

pytestmark = pytest.mark.integration


class ScriptedSolver:
    """A hand-written fake: answers prompt i correctly on the attempts listed for it."""

    solver_id = "scripted:v1"

    def __init__(self, correct: dict[str, set[int]], fail_prompts: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.correct = correct
        self.fail_prompts = fail_prompts
        self.calls: list[tuple[int, int]] = []
        self.seen: dict[str, int] = {}

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        self.calls.append((len(prompts), n))
        out = []
        for p in prompts:
            expr = p.split("Compute: ", 1)[1].split("\n", 1)[0]
            start = self.seen.get(p, 0)
            self.seen[p] = start + n
            if p in self.fail_prompts:
                out.append([Completion(None, error="HTTP 503 after retries")] * n)
                continue
            value = eval(expr)  # arith tasks only: digits and + - * ( )
            out.append([Completion(str(value if a in self.correct.get(expr, set()) else value + 1))
                        for a in range(start, start + n)])
        return out


def _run(store: Store) -> int:
    """The run the labels belong to (labels are per run; these tasks belong to none)."""
    with store.session() as s:
        return repo.get_or_create_run(s, "spotcheck-labels", "h", {})


def _store_tasks(store: Store, exprs: list[str]) -> list[int]:
    dom = ArithDomain()
    new = []
    for e in exprs:
        v = dom.check(dom.parse(e).task)  # type: ignore[arg-type]
        new.append(repo.NewTask("arith", v.task.content_hash, v.task.text, v.valid, v.task.payload,
                                topic=dom.topic(v.task)))
    with store.session() as s:
        return repo.add_tasks(s, None, new)


def test_trials_labels_and_false_positives(store: Store) -> None:
    exprs = ["1+2", "3*4", "5-6", "7*8+9"]
    ids = _store_tasks(store, exprs)
    solver = ScriptedSolver({"1+2": set(range(8)), "3*4": {0, 5}, "5-6": set()},
                            fail_prompts={"Compute: 7*8+9\nAnswer with a single integer."})
    band = Band(k=8, lo=1, hi=3, min_valid_trials=6)
    res = run_spotcheck(store, ArithDomain(), solver, ids, k=8, sampling=Sampling())
    assert (res.tasks, res.trials_written, res.null_trials) == (4, 32, 8)
    labels = harvest_labels(store, ids, solver.solver_id, band, run_id=_run(store))
    assert {i: (lab.solved, lab.valid_trials, lab.in_band) for i, lab in labels.items()} == {
        ids[0]: (8, 8, False), ids[1]: (2, 8, True), ids[2]: (0, 8, False), ids[3]: (0, 0, None)}
    fps = false_positives([(i, True, 0.9, labels[i]) for i in ids], 0.5, band)
    with store.session() as s:
        repo.register_probe(s, "p", "primary", "file:///p", "fp", {})
        ens = lineage.record_ensemble(s, None, lineage.EnsembleSpec("min", ("file:///p",)))
        assert lineage.add_false_positives(s, [(t, ens, *rest) for t, *rest in fps]) == 2
        sides = {r.task_id: r.side for r in s.scalars(select(FalsePositive))}
        nulls = s.scalars(select(SolverTrial.reason).where(SolverTrial.outcome == "null")).all()
        stored = s.scalars(select(Label)).all()
    assert sides == {ids[0]: "too_easy", ids[2]: "too_hard"}
    assert set(nulls) == {"HTTP 503 after retries"} and len(stored) == 4


def test_rerun_only_attempts_missing_trials(store: Store) -> None:
    ids = _store_tasks(store, ["1+1", "2+2"])
    solver = ScriptedSolver({})
    run_spotcheck(store, ArithDomain(), solver, ids[:1], k=3, sampling=Sampling())
    again = run_spotcheck(store, ArithDomain(), solver, ids, k=3, sampling=Sampling())
    assert again.trials_written == 3 and solver.calls == [(1, 3), (1, 3)]
    more = run_spotcheck(store, ArithDomain(), solver, ids, k=5, sampling=Sampling())
    assert more.trials_written == 4 and solver.calls[-1] == (2, 2)
    with store.session() as s:
        attempts = sorted(s.execute(select(SolverTrial.task_id, SolverTrial.attempt)).all())
    assert attempts == sorted((t, a) for t in ids for a in range(5))
    # partially attempted tasks are not labelled yet
    strict = Band(k=8, lo=1, hi=3, min_valid_trials=6)
    assert harvest_labels(store, ids, solver.solver_id, strict, run_id=_run(store)) == {}


class _AnnouncedMidway:
    """An endpoint that serves one checkpoint (no ``serve_version``); the trainer announces ``version``
    while the first batch of attempts runs."""

    def __init__(self, store: Store, name: str, version: str) -> None:
        self.inner = build_solver("synthetic", seed=1)
        self.store, self.name, self.version, self.solver_id = store, name, version, name

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        with self.store.session() as s:
            solver_versions.register(s, self.name, self.version)
        return self.inner.generate(prompts, n, sampling)


def test_a_check_of_a_superseded_version_is_refused(store: Store) -> None:
    """A message names the version the leader saw; once a newer one is announced the endpoint serves that
    one, so the worker refuses to record its attempts under the old version — before it starts, or when the
    announce comes while they run (#37)."""
    ids = _store_tasks(store, ["1+1", "2+2", "3*3"])
    with store.session() as s:
        solver_versions.register(s, "policy", "step-1")
    midway = _AnnouncedMidway(store, "policy", "step-2")
    out = run_spotcheck(store, ArithDomain(), midway, ids, k=4, sampling=Sampling(), solver_id="policy@step-1")
    assert out.refused is not None and "policy@step-2" in out.refused and out.trials_written == 0
    again = run_spotcheck(store, ArithDomain(), midway, ids, k=4, sampling=Sampling(), solver_id="policy@step-1")
    assert again.refused is not None and again.trials_written == 0  # refused before any attempt
    current = run_spotcheck(store, ArithDomain(), midway, ids, k=4, sampling=Sampling(), solver_id="policy@step-2")
    assert current.refused is None and current.trials_written == 12
    with store.session() as s:
        versions = set(s.scalars(select(SolverTrial.solver_version).where(SolverTrial.solver_name == "policy")))
    assert versions == {"step-2"}
