"""Evaluate a generator with the **real solver only** (never the probe) — PROPEL §4.1.

Sample ``N`` tasks, check validity, let the solver attempt every valid task ``k`` times, and report:

* **utility** = share of **all** generations (invalid ones included in the denominator) whose
  realised solve count lies in the band ``[lo, hi]`` — the paper's frontier rate;
* validity rate, the solve-count histogram (``invalid`` and ``unlabelled`` as their own buckets);
* Self-BLEU-3 and Distinct-3 over all generations (on a fixed-size subsample: both depend on the
  sample size) and the top-topic share over valid tasks, via :mod:`curriculum.reward.diversity`;
* the number of solver trials it spent (these are *evaluation* trials, never training signal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import Domain, Validity
from curriculum.labelling.spotcheck import LabelValue, label_tasks
from curriculum.reward.diversity import distinct_n, fixed_sample, self_bleu, topic_shares
from probes.band import Band


@dataclass(frozen=True)
class TaskOutcome:
    """One generation after evaluation; ``label`` is ``None`` for invalid tasks."""

    text: str
    valid: bool
    topic: str | None
    label: LabelValue | None

    @property
    def in_band(self) -> bool:
        return bool(self.label is not None and self.label.in_band)


@dataclass(frozen=True)
class EvaluationResult:
    """Everything the benchmark tables and the daemon's metrics need from one evaluation."""

    n: int
    n_valid: int
    n_in_band: int
    utility: float
    validity: float
    solve_histogram: dict[str, int]
    self_bleu3: float
    distinct3: float
    top_topic_share: float
    top_topic: str | None
    solver_trials: int
    band: tuple[int, int, int]
    outcomes: list[TaskOutcome] = field(default_factory=list, repr=False)

    def to_dict(self, include_outcomes: bool = False) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "outcomes"}
        data["band"] = {"k": self.band[0], "lo": self.band[1], "hi": self.band[2]}
        if include_outcomes:
            data["outcomes"] = [asdict(o) for o in self.outcomes]
        return data


def histogram(outcomes: Sequence[TaskOutcome], k: int) -> dict[str, int]:
    """Solve-count buckets ``"0"…"k"`` plus ``"invalid"`` and ``"unlabelled"`` (too few valid trials)."""
    counts: Counter[str] = Counter()
    for o in outcomes:
        if not o.valid:
            counts["invalid"] += 1
        elif o.label is None or o.label.in_band is None:
            counts["unlabelled"] += 1
        else:
            counts[str(o.label.solved)] += 1
    return {key: counts.get(key, 0) for key in [*map(str, range(k + 1)), "unlabelled", "invalid"]}


def summarise(outcomes: Sequence[TaskOutcome], band: Band, solver_trials: int,
              diversity_sample: int = 256, seed: int = 0) -> EvaluationResult:
    """Aggregate per-task outcomes into an :class:`EvaluationResult` (pure; used by the tests)."""
    n = len(outcomes)
    if n == 0:
        raise ValueError("cannot evaluate an empty sample")
    n_valid = sum(o.valid for o in outcomes)
    n_in = sum(o.in_band for o in outcomes)
    texts = fixed_sample([o.text for o in outcomes], min(diversity_sample, n), seed)
    topics = [o.topic for o in outcomes if o.valid and o.topic is not None]
    top = topic_shares(topics)[0] if topics else None
    return EvaluationResult(
        n=n, n_valid=n_valid, n_in_band=n_in, utility=n_in / n, validity=n_valid / n,
        solve_histogram=histogram(outcomes, band.k), self_bleu3=self_bleu(texts, 3), distinct3=distinct_n(texts, 3),
        top_topic_share=top[1] if top else 0.0, top_topic=top[0] if top else None,
        solver_trials=solver_trials, band=(band.k, band.lo, band.hi), outcomes=list(outcomes),
    )


def evaluate_texts(texts: Sequence[str], domain: Domain, solver: SolverBackend, band: Band,
                   sampling: Sampling | None = None, diversity_sample: int = 256) -> EvaluationResult:
    """Validate ``texts`` (generator completions), run the solver ``band.k`` times on each valid one."""
    checks: list[Validity] = domain.validate_batch(list(texts))
    valid_tasks = [c.task for c in checks if c.valid]
    labels = iter(label_tasks(domain, solver, valid_tasks, band, sampling or Sampling(seed=12345)))
    outcomes = [
        TaskOutcome(text=text, valid=c.valid, topic=domain.topic(c.task) if c.valid else None,
                    label=next(labels) if c.valid else None)
        for text, c in zip(texts, checks, strict=True)
    ]
    return summarise(outcomes, band, solver_trials=len(valid_tasks) * band.k, diversity_sample=diversity_sample)


def evaluate_policy(sample: Callable[[int, int], list[str]], n: int, seed: int, domain: Domain,
                    solver: SolverBackend, band: Band, sampling: Sampling | None = None,
                    diversity_sample: int = 256) -> EvaluationResult:
    """``sample(n, seed)`` (e.g. ``GeneratorTrainer.sample``) then :func:`evaluate_texts`."""
    return evaluate_texts(sample(n, seed), domain, solver, band, sampling, diversity_sample)
