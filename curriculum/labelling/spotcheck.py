"""Spot-checks: the real solver attempts sampled tasks k times; outcomes become labels; tasks the
probe called frontier whose real solve count falls outside the band become false positives.

Plain functions. The Celery task in ``workers/`` is a thin wrapper around :func:`run_spotcheck`,
and the embedded mode calls it in-process. Writes are idempotent: a trial is unique on
``(task, solver, attempt)``, and a re-run (a redelivered Celery message, a restarted daemon) only
attempts what is missing.

Sequential labelling (``spotcheck.sequential``; :func:`label_tasks` with ``sequential=True``,
:func:`run_spotcheck` with ``settle=band``): a task's attempts run one at a time and stop once its label is
settled (:meth:`probes.band.Band.settled`: no outcome of the remaining attempts can change it). The label is
the one all ``k`` attempts would give for the same outcomes; only the attempts actually run are stored and
counted. It needs a backend that runs single attempts (:func:`curriculum.common.solver_api.attempt_runner`);
a backend that samples ``k`` in one request runs all ``k``.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from curriculum.common.solver_api import AttemptRunner, Completion, Sampling, SolverBackend, attempt_runner
from curriculum.domains.base import Domain, Task
from curriculum.store import repo, solver_versions, trajectories
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial, TaskRow, utcnow
from probes.band import Band, Side


@dataclass(frozen=True)
class LabelValue:
    solved: int
    valid_trials: int
    in_band: bool | None  # None: fewer valid trials than the band requires
    attempts: int | None = None  # solver attempts run for it (nulls included; < k when settled early)

    def side(self, band: Band) -> str | None:
        """``too_hard`` below the band, ``too_easy`` above it, ``None`` inside or unlabelled."""
        side = band.side(self.solved, self.valid_trials)
        return side.value if side in (Side.TOO_EASY, Side.TOO_HARD) else None


def _counts(outcomes: Sequence[str]) -> tuple[int, int]:
    return sum(1 for o in outcomes if o == "pass"), sum(1 for o in outcomes if o in ("pass", "fail"))


def compute_label(outcomes: Sequence[str], band: Band) -> LabelValue:
    """Label from trial outcomes (``pass``/``fail``/``null``); ``null`` trials are excluded."""
    solved, valid = _counts(outcomes)
    return LabelValue(solved, valid, band.in_band(solved, valid), attempts=len(outcomes))


def settled(outcomes: Sequence[str], band: Band) -> bool:
    """Whether the outcomes so far (at most ``band.k``) fix the task's label whatever the remaining
    attempts give (:meth:`probes.band.Band.settled`); then :func:`compute_label` of them is that label."""
    solved, valid = _counts(outcomes)
    return band.settled(solved, valid, len(outcomes)) is not None


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
                chunk: int = 64, sequential: bool = False) -> list[LabelValue]:
    """``band.k`` solver attempts per task, graded and labelled in memory (nothing is stored).

    ``sequential`` (and a backend that runs single attempts, :func:`~curriculum.common.solver_api.attempt_runner`):
    attempts run one at a time per task, and a task stops once its label is settled — the same labels,
    fewer attempts (``LabelValue.attempts``). Tasks go to the solver ``chunk`` at a time; ``progress(n)``
    is called after each chunk."""
    runner = attempt_runner(solver) if sequential else None
    out: list[LabelValue] = []
    for start in range(0, len(tasks), max(1, chunk)):
        part = tasks[start:start + max(1, chunk)]
        prompts = bind_tasks(solver, domain, part)
        if runner is None:
            answers = solver.generate(prompts, band.k, sampling)
            outcomes = [[grade_outcome(domain, t, c.text) for c in row] for t, row in zip(part, answers, strict=True)]
        else:
            outcomes = [[] for _ in part]
            for open_, comps in _rounds(runner, prompts, outcomes, band, sampling):
                for i, comp in zip(open_, comps, strict=True):
                    outcomes[i].append(grade_outcome(domain, part[i], comp.text))
        out += [compute_label(o, band) for o in outcomes]
        if progress is not None:
            progress(len(part))
    return out


def _rounds(runner: AttemptRunner, prompts: Sequence[str], outcomes: Sequence[Sequence[str]], band: Band,
            sampling: Sampling) -> Iterator[tuple[list[int], list[Completion]]]:
    """Sequential labelling's rounds: each task whose label ``outcomes[i]`` has not settled gets its next
    attempt (index ``len(outcomes[i])``); yields (task positions, their completions). The caller appends
    each graded outcome before asking for the next round; a task stops at ``band.k`` attempts at the latest."""
    while open_ := [i for i, o in enumerate(outcomes) if not settled(o, band)]:
        yield open_, runner([prompts[i] for i in open_], [len(outcomes[i]) for i in open_], sampling)


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
    settled_early: int = 0  # tasks whose label settled before k attempts (sequential labelling)
    refused: str | None = None  # why nothing (more) was recorded: the version is no longer the one served


class SupersededVersion(RuntimeError):
    """The message's solver version is no longer the current one: the endpoint serves a newer checkpoint,
    whose attempts must not be recorded under the old version."""


def superseded(store: Store, solver_id: str) -> str | None:
    """Why trials of ``solver_id`` (``name@version``) can no longer be recorded — a newer version of the
    name is current, so the endpoint serves that — or None (it is current, or the name has no versions)."""
    name, version = solver_versions.split_solver_id(solver_id)
    with store.session() as s:
        cur = solver_versions.current(s, name)
    if cur is None or cur.version == version:
        return None
    return f"{solver_id} was superseded by {cur.qualified_id}: its trials would be the new checkpoint's"


def _stored(store: Store, task_ids: Sequence[int], solver_id: str, k: int
            ) -> tuple[dict[int, Task], dict[int, dict[int, str]]]:
    """The tasks and, per task, the outcomes of its stored attempts ``0…k−1`` by the solver."""
    with store.session() as s:
        rows = s.execute(select(TaskRow.id, TaskRow.domain, TaskRow.text, TaskRow.payload)
                         .where(TaskRow.id.in_(list(task_ids)))).all()
    tasks = {r.id: Task(domain=r.domain, text=r.text, payload=dict(r.payload)) for r in rows}
    return tasks, _outcomes(store, list(tasks), solver_id, k)


def _outcomes(store: Store, task_ids: Sequence[int], solver_id: str, k: int) -> dict[int, dict[int, str]]:
    """Per task, the stored outcomes of its attempts ``0…k−1`` by ``solver_id`` (the store is the truth:
    another worker may have written an attempt first)."""
    with store.session() as s:
        done = s.execute(select(SolverTrial.task_id, SolverTrial.attempt, SolverTrial.outcome).where(
            SolverTrial.task_id.in_(list(task_ids)), SolverTrial.solver_id == solver_id,
            SolverTrial.attempt < k)).all()
    have: dict[int, dict[int, str]] = {t: {} for t in task_ids}
    for tid, attempt, outcome in done:
        have[tid][attempt] = outcome
    return have


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
                  sampling: Sampling, solver_id: str | None = None, settle: Band | None = None) -> SpotCheckResult:
    """Attempt each task until it has ``k`` trials by ``solver``; store graded trials idempotently.

    ``solver_id`` is the qualified id (``name@version``, :mod:`curriculum.store.solver_versions`) the
    trials are recorded under — the version the solver's endpoint serves now; default: the backend's id.
    ``settle`` (sequential labelling, ``spotcheck.sequential``; ``settle.k`` must be ``k``): attempt a
    task one trial at a time, storing each round, and stop once its stored trials settle its label under
    that band — when the backend can run single attempts (:func:`~curriculum.common.solver_api.attempt_runner`);
    a batched backend runs all ``k`` as without it.
    """
    start = time.perf_counter()
    sid = solver_id or solver.solver_id
    serve = getattr(solver, "serve_version", None)  # an instrument that can act as any version (synthetic)
    if serve is not None:
        serve(sid.rpartition("@")[2] if "@" in sid else "")
    if settle is not None and settle.k != k:
        raise ValueError(f"settle band has k={settle.k}, the spot-check asks for k={k}")
    tasks, have = _stored(store, task_ids, sid, k)
    runner = attempt_runner(solver) if settle is not None else None
    write = _TrialWriter(store, domain, tasks, sid, check_version=serve is None)
    try:
        early = _attempt(solver, domain, runner, tasks, have, k, settle, sampling, write)
    except SupersededVersion as err:  # a message sent before an announce, run after it: refused
        return SpotCheckResult(len(tasks), write.written, write.nulls, time.perf_counter() - start, refused=str(err))
    return SpotCheckResult(len(tasks), write.written, write.nulls, time.perf_counter() - start, early)


def _attempt(solver: SolverBackend, domain: Domain, runner: AttemptRunner | None, tasks: dict[int, Task],
             have: dict[int, dict[int, str]], k: int, settle: Band | None, sampling: Sampling,
             write: _TrialWriter) -> int:
    """The missing attempts (sequentially when ``runner`` and ``settle``); returns the tasks settled early."""
    write.ensure_current()
    if runner is not None and settle is not None:
        return _sequential(solver, runner, tasks, have, settle, sampling, write)
    missing = {t: [a for a in range(k) if a not in done] for t, done in have.items()}
    by_count: dict[int, list[int]] = defaultdict(list)
    for tid, attempts in missing.items():
        if attempts:
            by_count[len(attempts)].append(tid)
    for n, tids in sorted(by_count.items()):
        comps = solver.generate(bind_tasks(solver, domain, [tasks[t] for t in tids]), n, sampling)
        write([(t, attempt, comp) for t, row in zip(tids, comps, strict=True)
               for attempt, comp in zip(missing[t], row, strict=True)])
    return 0


@dataclass
class _TrialWriter:
    """Grades completions into trials and stores them (with agent turns) in one transaction per call."""

    store: Store
    domain: Domain
    tasks: dict[int, Task]
    solver_id: str
    check_version: bool = False  # a real endpoint serves one version: refuse once the message's is superseded
    written: int = 0
    nulls: int = 0

    def ensure_current(self) -> None:
        why = superseded(self.store, self.solver_id) if self.check_version else None
        if why is not None:
            raise SupersededVersion(why)

    def __call__(self, done: Sequence[tuple[int, int, Completion]]) -> list[repo.NewTrial]:
        self.ensure_current()  # an announce while these attempts ran: they may be the new checkpoint's
        trials = [_trial(self.domain, self.tasks[t], t, self.solver_id, attempt, comp) for t, attempt, comp in done]
        self.nulls += sum(1 for tr in trials if tr.outcome == "null")
        with self.store.session() as s:
            self.written += repo.add_trials(s, trials)
            _trajectories(s, self.solver_id, done)
        return trials


def _sequential(solver: SolverBackend, runner: AttemptRunner, tasks: dict[int, Task], have: dict[int, dict[int, str]],
                band: Band, sampling: Sampling, write: _TrialWriter) -> int:
    """Rounds of one attempt per unsettled task (its lowest missing attempt index), each round stored
    before the next, so a redelivered message resumes where the last one stopped. Returns the tasks
    settled before ``band.k`` attempts."""
    tids = sorted(tasks)
    prompts = dict(zip(tids, bind_tasks(solver, write.domain, [tasks[t] for t in tids]), strict=True))
    while open_ := [t for t in tids if not settled(list(have[t].values()), band)]:
        attempts = [min(a for a in range(band.k) if a not in have[t]) for t in open_]
        comps = runner([prompts[t] for t in open_], attempts, sampling)
        write(list(zip(open_, attempts, comps, strict=True)))
        # what is stored, not what this worker ran: a second worker settling the same check (a redelivered
        # message) may have written an attempt first, and its outcome is the one the label is made of
        have.update(_outcomes(write.store, open_, write.solver_id, band.k))
    return sum(1 for t in tids if len(have[t]) < band.k)


def harvest_labels(store: Store, task_ids: Sequence[int], solver_id: str, band: Band, *, run_id: int,
                   source: str = "spotcheck", sequential: bool = False) -> dict[int, LabelValue]:
    """Label (for run ``run_id``) every task that has all ``k`` trials stored — with ``sequential``, every
    task whose stored trials settle its label (:func:`settled`; all ``k`` always do); tasks still in flight
    are left out.

    The stored row's ``k`` is the attempts behind it (``band.k``, or fewer for a label settled early)."""
    with store.session() as s:
        rows = s.execute(select(SolverTrial.task_id, SolverTrial.outcome).where(
            SolverTrial.task_id.in_(list(task_ids)), SolverTrial.solver_id == solver_id,
            SolverTrial.attempt < band.k)).all()
    outcomes: dict[int, list[str]] = defaultdict(list)
    for tid, outcome in rows:
        outcomes[tid].append(outcome)
    labels = {t: compute_label(o, band) for t, o in outcomes.items()
              if len(o) >= band.k or (sequential and settled(o, band))}
    with store.session() as s:
        for tid, lab in labels.items():
            repo.upsert_label(s, tid, solver_id, source, run_id=run_id, k=lab.attempts or band.k, solved=lab.solved,
                              valid_trials=lab.valid_trials, band=(band.lo, band.hi), in_band=lab.in_band)
    return labels


def trials_since(store: Store, solver_id: str, seconds: float, distinct_tasks: bool = True) -> int:
    """Tasks (or, with ``distinct_tasks=False``, trial rows) of the solver in the last ``seconds``.

    Counted over every version of the solver's *name* (``policy@7`` and ``policy`` both count
    ``policy``): the budget is the endpoint's, whichever checkpoint it serves.
    """
    since = utcnow() - timedelta(seconds=seconds)
    what = func.count(func.distinct(SolverTrial.task_id)) if distinct_tasks else func.count()
    name = solver_versions.split_solver_id(solver_id)[0]
    with store.session() as s:
        q = select(what).select_from(SolverTrial).where(SolverTrial.solver_name == name,
                                                         SolverTrial.created_at >= since)
        return int(s.execute(q).scalar_one())
