"""Spot-checks: the real solver attempts sampled tasks k times; outcomes become labels; tasks the
probe called frontier whose real solve count falls outside the band become false positives.

Plain functions. The Celery task in ``workers/`` is a thin wrapper around :func:`run_spotcheck`,
and the embedded mode calls it in-process. Writes are idempotent: a trial is unique on
``(task, solver, attempt)``, and a re-run (a redelivered Celery message, a restarted daemon) only
attempts what is missing.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from curriculum.domains.base import Domain, Task
from curriculum.solvers.base import Completion, Sampling, SolverBackend
from curriculum.store import repo, trajectories
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial, TaskRow, utcnow
from probes.band import Band, Side


@dataclass(frozen=True)
class LabelValue:
    solved: int
    valid_trials: int
    in_band: bool | None  # None: fewer valid trials than the band requires

    def side(self, band: Band) -> str | None:
        """``too_hard`` below the band, ``too_easy`` above it, ``None`` inside or unlabelled."""
        side = band.side(self.solved, self.valid_trials)
        return side.value if side in (Side.TOO_EASY, Side.TOO_HARD) else None


def compute_label(outcomes: Sequence[str], band: Band) -> LabelValue:
    """Label from trial outcomes (``pass``/``fail``/``null``); ``null`` trials are excluded."""
    solved = sum(1 for o in outcomes if o == "pass")
    valid = sum(1 for o in outcomes if o in ("pass", "fail"))
    return LabelValue(solved, valid, band.in_band(solved, valid))


def grade_outcome(domain: Domain, task: Task, answer: str | None) -> str:
    """One attempt's outcome: ``null`` when there is no answer or grading could not happen."""
    if answer is None:
        return "null"
    verdict = domain.grade(task, answer)
    return "null" if verdict is None else ("pass" if verdict else "fail")


def bind_tasks(solver: SolverBackend, domain: Domain, tasks: Sequence[Task]) -> list[str]:
    """The solver prompts of ``tasks``; a solver that needs the task behind a prompt (the SWE agent:
    which bug to apply to its copy) is given them through its optional ``bind_tasks``."""
    prompts = [domain.solver_prompt(t) for t in tasks]
    bind = getattr(solver, "bind_tasks", None)
    if bind is not None:
        bind(dict(zip(prompts, tasks, strict=True)))
    return prompts


def label_tasks(domain: Domain, solver: SolverBackend, tasks: Sequence[Task], band: Band,
                sampling: Sampling, progress: Callable[[int], None] | None = None,
                chunk: int = 64) -> list[LabelValue]:
    """``band.k`` solver attempts per task, graded and labelled in memory (nothing is stored).

    Tasks go to the solver ``chunk`` at a time; ``progress(n)`` is called after each chunk."""
    out: list[LabelValue] = []
    for start in range(0, len(tasks), max(1, chunk)):
        part = tasks[start:start + max(1, chunk)]
        answers = solver.generate(bind_tasks(solver, domain, part), band.k, sampling)
        out += [compute_label([grade_outcome(domain, t, c.text) for c in row], band)
                for t, row in zip(part, answers, strict=True)]
        if progress is not None:
            progress(len(part))
    return out


def false_positives(items: Sequence[tuple[int, bool, float, LabelValue]], threshold: float,
                    band: Band) -> list[tuple[int, str, int, int, float]]:
    """From ``(task_id, valid, probe probability, label)`` pick the valid, probe-high tasks whose
    label lies outside the band. Returns ``(task_id, side, solved, valid_trials, probability)``."""
    out = []
    for task_id, valid, prob, label in items:
        side = label.side(band)
        if valid and prob >= threshold and side is not None:
            out.append((task_id, side, label.solved, label.valid_trials, prob))
    return out


def select_candidates(scored: Sequence[tuple[int, float]], budget: int, probe_high_share: float,
                      threshold: float, seed: int) -> list[int]:
    """Choose ≤ ``budget`` task ids: probe-high first (highest probability first — false positives
    live there), then a random calibration slice from the rest. Deterministic in ``seed``."""
    if budget <= 0 or not scored:
        return []
    high = sorted((s for s in scored if s[1] >= threshold), key=lambda s: (-s[1], s[0]))
    n_high = min(len(high), round(budget * probe_high_share))
    chosen = [t for t, _ in high[:n_high]]
    rest = sorted(t for t, _ in scored if t not in set(chosen))
    random.Random(seed).shuffle(rest)
    return chosen + rest[: budget - len(chosen)]


def budget_left(used_this_hour: int, per_hour: int, per_cycle: int) -> int:
    """Tasks that may still be spot-checked this cycle under both budgets."""
    return max(0, min(per_cycle, per_hour - used_this_hour))


@dataclass(frozen=True)
class SpotCheckResult:
    tasks: int
    trials_written: int
    null_trials: int
    elapsed_s: float


def _missing_attempts(store: Store, task_ids: Sequence[int], solver_id: str, k: int
                      ) -> tuple[dict[int, Task], dict[int, list[int]]]:
    with store.session() as s:
        rows = s.execute(select(TaskRow.id, TaskRow.domain, TaskRow.text, TaskRow.payload)
                         .where(TaskRow.id.in_(list(task_ids)))).all()
        done = s.execute(select(SolverTrial.task_id, SolverTrial.attempt).where(
            SolverTrial.task_id.in_(list(task_ids)), SolverTrial.solver_id == solver_id)).all()
    tasks = {r.id: Task(domain=r.domain, text=r.text, payload=dict(r.payload)) for r in rows}
    have: dict[int, set[int]] = defaultdict(set)
    for tid, attempt in done:
        have[tid].add(attempt)
    missing = {t: [a for a in range(k) if a not in have[t]] for t in tasks}
    return tasks, {t: m for t, m in missing.items() if m}


def _trial(domain: Domain, task: Task, task_id: int, solver_id: str, attempt: int,
           comp: Completion) -> repo.NewTrial:
    if comp.text is None:
        return repo.NewTrial(task_id, solver_id, attempt, "null", reason=comp.error or "no completion",
                             latency_s=comp.latency_s)
    verdict = domain.grade(task, comp.text)
    if verdict is None:
        return repo.NewTrial(task_id, solver_id, attempt, "null", reason="grading failed",
                             answer=comp.text, latency_s=comp.latency_s)
    ending = comp.meta.get("stop_reason")  # an agent episode's end (stop, max_steps, loop, time) is kept
    return repo.NewTrial(task_id, solver_id, attempt, "pass" if verdict else "fail", answer=comp.text,
                         latency_s=comp.latency_s, reason=None if ending is None else str(ending))


def _trajectories(sess: Session, solver_id: str, done: Sequence[tuple[int, int, Completion]]) -> None:
    """Store each agent trial's turns (``Completion.meta["turns"]``) row by row beside its trial."""
    for task_id, attempt, comp in done:
        turns = comp.meta.get("turns")
        if isinstance(turns, list) and turns:
            trajectories.add_turns(sess, task_id, "solver", solver_id, attempt, turns)


def run_spotcheck(store: Store, domain: Domain, solver: SolverBackend, task_ids: Sequence[int], k: int,
                  sampling: Sampling, solver_id: str | None = None) -> SpotCheckResult:
    """Attempt each task until it has ``k`` trials by ``solver``; store graded trials idempotently.

    ``solver_id`` is the qualified id (``name@version``, :mod:`curriculum.solver_versions`) the
    trials are recorded under — the version the solver's endpoint serves now; default: the backend's id.
    """
    start = time.perf_counter()
    sid = solver_id or solver.solver_id
    serve = getattr(solver, "serve_version", None)  # an instrument that can act as any version (synthetic)
    if serve is not None:
        serve(sid.rpartition("@")[2] if "@" in sid else "")
    tasks, missing = _missing_attempts(store, task_ids, sid, k)
    by_count: dict[int, list[int]] = defaultdict(list)
    for tid, attempts in missing.items():
        by_count[len(attempts)].append(tid)
    written = nulls = 0
    for n, tids in sorted(by_count.items()):
        comps = solver.generate(bind_tasks(solver, domain, [tasks[t] for t in tids]), n, sampling)
        trials = [_trial(domain, tasks[t], t, sid, attempt, comp)
                  for t, row in zip(tids, comps, strict=True)
                  for attempt, comp in zip(missing[t], row, strict=True)]
        nulls += sum(1 for tr in trials if tr.outcome == "null")
        with store.session() as s:
            written += repo.add_trials(s, trials)
            _trajectories(s, sid, [(t, attempt, comp) for t, row in zip(tids, comps, strict=True)
                                   for attempt, comp in zip(missing[t], row, strict=True)])
    return SpotCheckResult(len(tasks), written, nulls, time.perf_counter() - start)


def harvest_labels(store: Store, task_ids: Sequence[int], solver_id: str, band: Band,
                   source: str = "spotcheck") -> dict[int, LabelValue]:
    """Label every task that has all ``k`` trials stored; tasks still in flight are left out."""
    with store.session() as s:
        rows = s.execute(select(SolverTrial.task_id, SolverTrial.outcome).where(
            SolverTrial.task_id.in_(list(task_ids)), SolverTrial.solver_id == solver_id,
            SolverTrial.attempt < band.k)).all()
    outcomes: dict[int, list[str]] = defaultdict(list)
    for tid, outcome in rows:
        outcomes[tid].append(outcome)
    labels = {t: compute_label(o, band) for t, o in outcomes.items() if len(o) >= band.k}
    with store.session() as s:
        for tid, lab in labels.items():
            repo.upsert_label(s, tid, solver_id, source, k=band.k, solved=lab.solved,
                              valid_trials=lab.valid_trials, band=(band.lo, band.hi), in_band=lab.in_band)
    return labels


def trials_since(store: Store, solver_id: str, seconds: float, distinct_tasks: bool = True) -> int:
    """Tasks (or, with ``distinct_tasks=False``, trial rows) of the solver in the last ``seconds``.

    Counted over every version of the solver's *name* (``policy@7`` and ``policy`` both count
    ``policy``): the budget is the endpoint's, whichever checkpoint it serves.
    """
    from curriculum.solver_versions import split_solver_id

    since = utcnow() - timedelta(seconds=seconds)
    what = func.count(func.distinct(SolverTrial.task_id)) if distinct_tasks else func.count()
    with store.session() as s:
        q = select(what).select_from(SolverTrial).where(SolverTrial.solver_name == split_solver_id(solver_id)[0],
                                                         SolverTrial.created_at >= since)
        return int(s.execute(q).scalar_one())
