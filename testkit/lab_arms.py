"""Two closed-loop arms a lab would use instead of this service (#35); the daemon plays no part in them.

**Reasoning Gym with its own curriculum** (:class:`ReasoningGymSource`, package ``reasoning-gym`` 0.1.25,
an optional install: see ``docs/FRONTIER.md``). Tasks come from its ``BasicArithmeticDataset`` at the level
of its ``BasicArithmeticCurriculum`` (attributes ``num_terms`` levels 2-6 and ``num_digits`` levels 1-4;
``generate_configuration`` with the default inclusive context turns the levels into ranges). The level is
raised with ``increment_global_level()`` — what RG's ``CurriculumExperiment.update_difficulty(…, "increment")``
calls — when the trainer's accuracy over its last ``window`` groups passes ``threshold``; the window is then
cleared (RG's ``ScoreBoard`` has ``clear(dataset)`` for that).
The config is restricted to what the project's arith domain can represent, and every task is validated by it:

* ``allow_parentheses = False``: RG's parenthesised generator writes negative literals (``3 - -5``), which
  the arith grammar has no unary minus for (about 9 in 10 of its expressions are then invalid);
* ``operators = + - *``: the arith domain has no division;
* ``num_digits`` at most level 2 (3 digits): literals must be 0-999 (RG draws 0..10**digits, so an
  occasional 1000 is rejected by validation and counted in ``rejected``).

Grading uses the project's arith grader on the same expression, never RG's answer: RG 0.1.25's parenthesis-free
generator computes its answer left to right (``2 + 3 * 4`` → 20), so with ``*`` its answer — and
``score_answer`` — disagree with the expression's value on about a quarter of 3-4 term problems.

**Online difficulty filtering** (:func:`filter_batch`): balanced filtering as in Bae et al. 2025, "Online
Difficulty Filtering for Reasoning Oriented Reinforcement Learning" (arXiv 2504.03380; DAPO's dynamic
sampling is the same family). What is followed: candidates are drawn from a static pool, the trainer's own
policy rolls out its group of ``k`` for each, groups whose accuracy is not strictly between 0 and 1 (the
``lo``/``hi`` bounds, exclusive) are dropped because their GRPO advantage is zero, and the kept groups are
stacked until the training batch is full, drawing again as needed. The kept groups' rollouts are the ones
trained on (not rolled out again); every rollout, kept or dropped, is counted. What is not followed: the
paper's larger-scale settings (its prompt batch, k and bounds); here they are the harness's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task

T = TypeVar("T")
RG_MISSING = "the reasoning_gym arm needs `pip install reasoning-gym==0.1.25` (see docs/FRONTIER.md)"
RG_OPERATORS = ("+", "-", "*")
RG_MAX_DRAWS = 1_000  # dataset draws one tasks() call makes before it gives up short
RG_MAX_DIGITS_LEVEL = 2  # num_digits levels [1, 2, 3, 4]: index 2 = 3 digits, the arith domain's 0-999


@dataclass(frozen=True)
class RGSettings:
    threshold: float = 0.7  # raise the level when the window's accuracy reaches this
    window: int = 32  # trainer groups the accuracy is taken over
    max_digits_level: int = RG_MAX_DIGITS_LEVEL


def require_reasoning_gym() -> Any:
    """The ``reasoning_gym.arithmetic`` module, or one line naming the install."""
    try:
        from reasoning_gym import arithmetic
    except ImportError as exc:
        raise RuntimeError(RG_MISSING) from exc
    return arithmetic


class ReasoningGymSource:
    """Tasks from RG's basic-arithmetic generator at its curriculum's level; the level follows the trainer."""

    def __init__(self, settings: RGSettings, seed: int, max_ops: int = 6) -> None:
        self.rg = require_reasoning_gym()
        self.s, self.seed = settings, seed
        self.curriculum = self.rg.BasicArithmeticCurriculum()
        self.domain = ArithDomain(max_ops=max_ops)
        self.scores: deque[float] = deque(maxlen=settings.window)
        self.batches = self.drawn = self.rejected = 0  # over the source's life (statistics only)
        self.seen: set[str] = set()
        self.raised_at: list[int] = []  # groups recorded when each raise happened

    @property
    def level(self) -> int:
        return int(self.curriculum.get_max_level())

    def config(self, n: int) -> Any:
        """The dataset config at the current level, restricted to what the arith domain represents."""
        return self.curriculum.generate_configuration(defaults={
            "operators": RG_OPERATORS, "allow_parentheses": False, "allow_negation": False,
            "seed": self.seed * 1_000_003 + self.drawn, "size": n})  # RG seeds item i with seed + i: no overlap

    def tasks(self, n: int) -> list[Task]:
        """``n`` valid arith tasks from RG's generator at the current level, none served before by this
        source (the queue refuses a task already in its run); items the domain rejects are counted."""
        out: list[Task] = []
        draws = 0  # this call's draws: the give-up bound is per call, never over the source's life
        while len(out) < n:
            if draws == RG_MAX_DRAWS:
                raise RuntimeError(f"RG produced only {len(out)}/{n} valid arith tasks at level {self.level} "
                                   f"in {draws} draws")
            dataset = self.rg.BasicArithmeticDataset(self.config(2 * (n - len(out))))
            draws += 1
            self.batches += 1
            items = [item["metadata"]["expression"] for item in dataset]
            self.drawn += len(items)
            for v in self.domain.validate_batch(items):
                if v.valid and len(out) < n and v.task.content_hash not in self.seen:
                    self.seen.add(v.task.content_hash)
                    out.append(v.task)
                self.rejected += not v.valid
        return out

    def can_raise(self) -> bool:
        """Some attribute is below its top level (``num_digits``: below ``max_digits_level``)."""
        tops = {name: len(attr.levels) - 1 for name, attr in self.curriculum.attributes.items()}
        tops["num_digits"] = min(tops["num_digits"], self.s.max_digits_level)
        return any(self.curriculum.get_attr_level(name) < top for name, top in tops.items())

    def record(self, solved: Sequence[int], group: int) -> bool:
        """The trainer's groups (solves of ``group`` each); raise the level once the window's accuracy
        reaches the threshold. True when the level was raised."""
        self.scores.extend(n / group for n in solved)
        if len(self.scores) < self.s.window or sum(self.scores) / len(self.scores) < self.s.threshold:
            return False
        if not self.can_raise():
            return False
        self.curriculum.increment_global_level()
        if self.curriculum.get_attr_level("num_digits") > self.s.max_digits_level:
            self.curriculum.set_attr_level("num_digits", self.s.max_digits_level)
        self.scores.clear()
        self.raised_at.append(self.level)
        return True


@dataclass
class FilterStats:
    """Every candidate the filter rolled out: kept, dropped as too easy (accuracy ≥ hi), as too hard (≤ lo)."""

    candidates: int = 0
    kept: int = 0
    too_easy: int = 0
    too_hard: int = 0
    rollouts: int = 0  # every completion generated (kept and dropped groups)
    dropped_rollouts: int = 0

    def add(self, other: FilterStats) -> None:
        for f in vars(self):
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass
class Filtered(Generic[T]):
    kept: list[tuple[T, int]] = field(default_factory=list)  # (candidate, solves of the group)
    dropped: list[tuple[T, int]] = field(default_factory=list)
    stats: FilterStats = field(default_factory=FilterStats)


def filter_batch(draw: Callable[[int], list[T]], rollout: Callable[[list[T]], list[int]], batch: int, group: int,
                 lo: float = 0.0, hi: float = 1.0, max_candidates: int | None = None) -> Filtered[T]:
    """Balanced online difficulty filtering: draw candidates, roll out ``group`` attempts each with the
    trainer's policy, keep groups with ``lo < accuracy < hi``, refill until ``batch`` are kept.

    ``draw(n)`` returns up to ``n`` candidates (fewer or none when the pool runs out: the batch is then
    returned short); ``rollout(cands)`` the solves per candidate. Stops after ``max_candidates`` draws
    (default 64 × batch) so a pool with no intermediate task cannot loop forever."""
    out: Filtered[T] = Filtered()
    limit = max_candidates if max_candidates is not None else 64 * batch
    while len(out.kept) < batch and out.stats.candidates < limit:
        cands = draw(min(batch - len(out.kept), limit - out.stats.candidates))
        if not cands:
            break
        solved = rollout(cands)
        out.stats.candidates += len(cands)
        out.stats.rollouts += group * len(cands)
        for c, n in zip(cands, solved, strict=True):
            if lo < n / group < hi:
                out.kept.append((c, n))
                continue
            out.dropped.append((c, n))
            out.stats.dropped_rollouts += group
            out.stats.too_easy += n / group >= hi
            out.stats.too_hard += n / group <= lo
    out.stats.kept = len(out.kept)
    return out
