"""Generator-RL rewards (TRL signature ``fn(prompts, completions, **kw) -> list[float | None]``).

Contract (ARCHITECTURE §4, PROPEL §3.3 Eq. 3):

* :class:`HardGateReward` — invalid → ``floor``; valid → the probe (ensemble) **logit**. The floor
  must lie *below* the probe's logit range: a fixed −1 is wrong for a probe whose logits sit near
  −8 (measured here — it rewarded invalid output). :meth:`HardGateReward.calibrated` sets
  ``floor = min(logits on a calibration sample) − margin``; valid logits that drift below the floor
  during RL are clipped to ``floor + margin/2`` so a valid task never earns less than an invalid one.
* :class:`SoftGateReward` — invalid → ``floor`` (default −1); valid → probability in [0, 1].
* :class:`ProbeOnlyReward` — the logit of every completion, no validity gate.
* :class:`SolverInTheLoopReward` — the SIL baseline: ``k`` live solver attempts per valid task,
  reward 1 when the solve count is in band, 0 outside, ``invalid_reward`` for invalid tasks; it
  counts its solver trials.

WCO (``min`` over ensemble members) and the auxiliary-probe constraint ``min(primary, aux)`` are
done by :class:`probes.ProbeEnsemble` inside the scorer. Every reward is a picklable callable
class. A reward that cannot be computed **raises** (a probe error, a NaN logit, a solver that
returns too few valid trials); it never silently becomes 0. Every call appends a
:class:`RewardCallLog` (mean/std, share of GRPO groups with zero spread, validity rate) to
``self.logs`` and, inside TRL, reports the same numbers through ``log_metric``.

Diversity (issue #22, off by default): a probe reward built with a
:class:`curriculum.reward.novelty.DiversityTerm` subtracts ``weight × penalty`` (penalty ∈ [0, 1], repetition
within the GRPO group and against the archive of emitted tasks) from its **valid** completions
only, and never takes a valid reward down to the invalid floor: the hard gate clips at
``valid_minimum`` as before, the soft gate at ``floor / 2``. The mean penalty of the valid
completions is logged as ``diversity_penalty`` (``propel/diversity_penalty``).

Topic share (issue #34): a probe reward built with a :class:`curriculum.reward.topic_share.TopicShareTerm`
also subtracts ``weight × penalty`` (penalty ∈ [0, 1], the topic's share of the recent window above its
target) from its valid completions, under the same valid minimum; the mean penalty of the valid
completions is logged as ``topic_share_penalty`` (``propel/topic_share_penalty``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.domains.base import Domain, Validity, generation_text
from curriculum.labelling.spotcheck import compute_label, grade_outcome
from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.topic_share import TopicShareTerm
from probes.band import Band


class RewardError(RuntimeError):
    """The reward could not be computed for this batch; training must stop, not see zeros."""


class Scorer(Protocol):
    """What a probe reward needs: ``probes.ProbeScorer`` satisfies it."""

    def score(self, texts: Sequence[str]) -> Any:
        """An object with ``.logits`` and ``.probabilities`` arrays of length ``len(texts)``."""
        ...


@dataclass(frozen=True)
class RewardCallLog:
    """Statistics of one reward call (one GRPO generation batch)."""

    n: int
    mean: float
    std: float
    zero_spread_share: float
    validity_rate: float
    clipped_share: float = 0.0
    solver_trials: int = 0
    diversity_penalty: float | None = None  # mean over valid completions; None when the term is off
    topic_share_penalty: float | None = None  # mean over valid completions; None when the term is off

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items() if v is not None}


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string, or the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise RewardError(f"unsupported completion type {type(completion).__name__}")


def zero_spread_share(rewards: Sequence[float], group_size: int) -> float:
    """Share of consecutive groups of ``group_size`` whose rewards are all equal (no GRPO signal)."""
    if group_size < 1 or len(rewards) % group_size:
        return float("nan")
    groups = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    return float(np.mean(np.ptp(groups, axis=1) == 0.0)) if len(groups) else float("nan")


def floor_below(logits: Sequence[float] | np.ndarray, margin: float) -> float:
    """``min(logits) - margin``: an invalid floor strictly below the observed logit range."""
    values = np.asarray(logits, dtype=np.float64)
    if values.size == 0 or not np.isfinite(values).all():
        raise RewardError("cannot calibrate a floor: calibration logits are empty or not finite")
    if margin <= 0:
        raise ValueError(f"margin must be > 0, got {margin}")
    return float(values.min() - margin)


#: Generations a reward keeps for :meth:`_LoggedReward.take_rollouts` (the oldest go beyond this).
ROLLOUT_KEEP = 4096


class _LoggedReward:
    """Shared plumbing: validation, logging, TRL ``log_metric`` forwarding, the rollouts it scored."""

    __name__ = "reward"

    def __init__(self, domain: Domain, group_size: int) -> None:
        self.domain = domain
        self.group_size = group_size
        self.logs: list[RewardCallLog] = []
        self.rollouts: deque[str] = deque(maxlen=ROLLOUT_KEEP)

    def take_rollouts(self) -> list[str]:
        """The generations validated since the last call, oldest first (what the domain parses, as
        :meth:`GeneratorTrainer.sample <curriculum.rl.generator.GeneratorTrainer.sample>` returns them):
        the RL chunk's rollouts, which the daemon offers for emission beside its sample."""
        out = list(self.rollouts)
        self.rollouts.clear()
        return out

    def _validate(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[Validity]:
        """Validity of each generation (its prompt joined in where the domain's prompt carries part of
        the task: :func:`~curriculum.domains.base.generation_text`)."""
        if len(prompts) != len(completions):
            raise RewardError(f"{len(prompts)} prompts for {len(completions)} completions")
        texts = [generation_text(self.domain, completion_text(p), completion_text(c))
                 for p, c in zip(prompts, completions, strict=True)]
        self.rollouts.extend(texts)
        return self.domain.validate_batch(texts)

    def _record(self, rewards: list[float], valid: Sequence[bool], kwargs: dict[str, Any],
                clipped: int = 0, trials: int = 0, diversity_penalty: float | None = None,
                topic_share_penalty: float | None = None) -> list[float]:
        if any(not math.isfinite(r) for r in rewards):
            raise RewardError(f"{type(self).__name__} produced a non-finite reward: {rewards}")
        arr = np.asarray(rewards, dtype=np.float64)
        log = RewardCallLog(
            n=len(rewards), mean=float(arr.mean()) if arr.size else float("nan"),
            std=float(arr.std()) if arr.size else float("nan"),
            zero_spread_share=zero_spread_share(rewards, self.group_size),
            validity_rate=float(np.mean(valid)) if len(valid) else float("nan"),
            clipped_share=clipped / max(1, len(rewards)), solver_trials=trials,
            diversity_penalty=diversity_penalty, topic_share_penalty=topic_share_penalty,
        )
        self.logs.append(log)
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None:
            for key in ("validity_rate", "zero_spread_share", "clipped_share"):
                log_metric(f"propel/{key}", float(getattr(log, key)))
            for key, value in (("diversity_penalty", diversity_penalty), ("topic_share_penalty", topic_share_penalty)):
                if value is not None:
                    log_metric(f"propel/{key}", value)
        return rewards


def _probe_outputs(scorer: Scorer, texts: list[str], what: str) -> tuple[np.ndarray, np.ndarray]:
    if not texts:
        return np.zeros(0), np.zeros(0)
    scores = scorer.score(texts)
    logits = np.asarray(scores.logits, dtype=np.float64)
    probs = np.asarray(scores.probabilities, dtype=np.float64)
    if logits.shape != (len(texts),) or probs.shape != (len(texts),):
        raise RewardError(f"{what}: scorer returned {logits.shape} logits for {len(texts)} texts")
    if not (np.isfinite(logits).all() and np.isfinite(probs).all()):
        raise RewardError(f"{what}: scorer returned non-finite scores")
    return logits, probs


class ProbeReward(_LoggedReward, ABC):
    """A reward computed from validity checks and ensemble scores.

    ``__call__`` validates and scores a batch once; :meth:`from_scores` is the arithmetic alone, for
    callers that already validated and scored the batch (the daemon's sample phase: one
    validate-and-score pass per sample batch). The scores cover :meth:`scored_indices` of the checks.
    """

    scorer: Scorer
    diversity: DiversityTerm | None = None
    topic_share: TopicShareTerm | None = None

    def _penalise(self, checks: Sequence[Validity], rewards: list[float]) -> tuple[list[float], dict[str, float]]:
        """``rewards`` minus the diversity and topic-share terms on the valid completions, and the mean
        penalty of each term that is on (``diversity_penalty``, ``topic_share_penalty``)."""
        out, penalty = self._diversify(checks, rewards)
        means: dict[str, float] = {} if penalty is None else {"diversity_penalty": penalty}
        term = self.topic_share
        if term is not None:
            valid = [i for i, v in enumerate(checks) if v.valid]
            penalties = term.penalties([self.domain.topic(v.task) if v.valid else None for v in checks])
            for i in valid:
                out[i] -= term.weight * penalties[i]
            means["topic_share_penalty"] = float(np.mean([penalties[i] for i in valid])) if valid else 0.0
        return out, means

    def _diversify(self, checks: Sequence[Validity], rewards: list[float]) -> tuple[list[float], float | None]:
        """``rewards`` minus ``weight × penalty`` on the valid completions, and the mean penalty of the
        valid completions (``None`` when the term is off). The caller applies its valid minimum."""
        term = self.diversity
        if term is None:
            return rewards, None
        penalties = term.penalties([v.task.text if v.valid else None for v in checks], self.group_size)
        valid = [i for i, v in enumerate(checks) if v.valid]
        out = list(rewards)
        for i in valid:
            out[i] = rewards[i] - term.weight * penalties[i]
        return out, (float(np.mean([penalties[i] for i in valid])) if valid else 0.0)

    def scored_indices(self, checks: Sequence[Validity]) -> list[int]:
        """Which checks need a probe score (the valid ones, unless the reward ignores validity)."""
        return [i for i, v in enumerate(checks) if v.valid]

    def _gated(self, checks: Sequence[Validity], scores: Sequence[float], floor: float, valid_minimum: float,
               kwargs: dict[str, Any]) -> list[float]:
        """``floor`` for the checks without a score, ``scores`` (of :meth:`scored_indices`, in order) for
        the rest, minus the diversity term, then clipped below at ``valid_minimum``: a gate's arithmetic."""
        idx = self.scored_indices(checks)
        _check_scores(idx, scores, self.__name__)
        rewards = [floor] * len(checks)
        for i, score in zip(idx, scores, strict=True):
            rewards[i] = float(score)
        rewards, penalties = self._penalise(checks, rewards)
        clipped = _clip_valid(rewards, idx, valid_minimum)
        return self._record(rewards, [v.valid for v in checks], kwargs, clipped=clipped,
                            diversity_penalty=penalties.get("diversity_penalty"),
                            topic_share_penalty=penalties.get("topic_share_penalty"))

    @abstractmethod
    def from_scores(self, checks: Sequence[Validity], logits: Sequence[float], probabilities: Sequence[float],
                    **kwargs: Any) -> list[float]:
        """The rewards of ``checks`` from the scores of :meth:`scored_indices` (in that order)."""

    def from_valid_scores(self, checks: Sequence[Validity], logits: Sequence[float],
                          probabilities: Sequence[float], **kwargs: Any) -> list[float]:
        """The reward of ``checks`` whose valid entries are already scored (``logits``/``probabilities``
        in their order). Nothing is validated again; only what the reward needs beyond the valid
        tasks (``probe_only``'s invalid completions) is scored here."""
        valid = [i for i, v in enumerate(checks) if v.valid]
        have = dict(zip(valid, zip(logits, probabilities, strict=True), strict=True))
        need = self.scored_indices(checks)
        missing = [i for i in need if i not in have]
        if missing:
            extra_l, extra_p = _probe_outputs(self.scorer, [self.domain.reference_text(checks[i].task)
                                                            for i in missing], self.__name__)
            have |= dict(zip(missing, zip(extra_l.tolist(), extra_p.tolist(), strict=True), strict=True))
        return self.from_scores(checks, [have[i][0] for i in need], [have[i][1] for i in need], **kwargs)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        checks = self._validate(prompts, completions)
        idx = self.scored_indices(checks)
        logits, probs = _probe_outputs(self.scorer, [self.domain.reference_text(checks[i].task) for i in idx],
                                       self.__name__)
        return self.from_scores(checks, logits.tolist(), probs.tolist(), **kwargs)


def _check_scores(idx: list[int], logits: Sequence[float], what: str) -> None:
    if len(logits) != len(idx):
        raise RewardError(f"{what}: {len(logits)} scores for {len(idx)} scored completions")
    if not all(math.isfinite(x) for x in logits):
        raise RewardError(f"{what}: non-finite scores")


def _clip_valid(rewards: list[float], valid_idx: Sequence[int], minimum: float) -> int:
    """Raise the valid rewards below ``minimum`` to it (in place); returns how many were raised."""
    low = [i for i in valid_idx if rewards[i] < minimum]
    for i in low:
        rewards[i] = minimum
    return len(low)


class HardGateReward(ProbeReward):
    """Invalid → ``floor``; valid → ensemble logit (clipped below at ``floor + margin/2``)."""

    __name__ = "hard_gate"

    def __init__(self, domain: Domain, scorer: Scorer, floor: float, group_size: int, margin: float = 1.0) -> None:
        super().__init__(domain, group_size)
        if not math.isfinite(floor) or margin <= 0:
            raise ValueError(f"floor must be finite and margin > 0 (got {floor}, {margin})")
        self.scorer = scorer
        self.floor = float(floor)
        self.margin = float(margin)

    @classmethod
    def calibrated(cls, domain: Domain, scorer: Scorer, calibration_texts: Sequence[str], group_size: int,
                   margin: float = 1.0) -> HardGateReward:
        """Floor = min logit over ``calibration_texts`` (reference texts, e.g. a base-policy sample) − margin."""
        logits, _ = _probe_outputs(scorer, list(calibration_texts), "floor calibration")
        return cls(domain, scorer, floor_below(logits, margin), group_size, margin)

    @property
    def valid_minimum(self) -> float:
        return self.floor + self.margin / 2

    def from_scores(self, checks: Sequence[Validity], logits: Sequence[float], probabilities: Sequence[float],
                    **kwargs: Any) -> list[float]:
        return self._gated(checks, logits, self.floor, self.valid_minimum, kwargs)


class SoftGateReward(ProbeReward):
    """Invalid → ``floor`` (below 0); valid → probe probability."""

    __name__ = "soft_gate"

    def __init__(self, domain: Domain, scorer: Scorer, group_size: int, floor: float = -1.0) -> None:
        super().__init__(domain, group_size)
        if not floor < 0:
            raise ValueError(f"soft-gate floor must lie below the probability range [0, 1], got {floor}")
        self.scorer = scorer
        self.floor = float(floor)

    def from_scores(self, checks: Sequence[Validity], logits: Sequence[float], probabilities: Sequence[float],
                    **kwargs: Any) -> list[float]:
        return self._gated(checks, probabilities, self.floor, self.valid_minimum, kwargs)

    @property
    def valid_minimum(self) -> float:
        """The lowest reward of a valid task: halfway between the floor and 0 (only the diversity term
        can take a probability below 0)."""
        return self.floor / 2


class ProbeOnlyReward(ProbeReward):
    """The ensemble logit of every completion (no validity gate; the ablation of PROPEL Fig. 4b)."""

    __name__ = "probe_only"

    def __init__(self, domain: Domain, scorer: Scorer, group_size: int) -> None:
        super().__init__(domain, group_size)
        self.scorer = scorer

    def scored_indices(self, checks: Sequence[Validity]) -> list[int]:
        return list(range(len(checks)))

    def from_scores(self, checks: Sequence[Validity], logits: Sequence[float], probabilities: Sequence[float],
                    **kwargs: Any) -> list[float]:
        _check_scores(self.scored_indices(checks), logits, self.__name__)
        rewards, penalties = self._penalise(checks, [float(x) for x in logits])
        return self._record(rewards, [v.valid for v in checks], kwargs,
                            diversity_penalty=penalties.get("diversity_penalty"),
                            topic_share_penalty=penalties.get("topic_share_penalty"))


PROBE_REWARDS = ("hard_gate", "soft_gate", "probe_only")


def build_reward(kind: str, domain: Domain, scorer: Scorer, calibration_texts: Sequence[str], group_size: int,
                 margin: float = 1.0, diversity: DiversityTerm | None = None,
                 topic_share: TopicShareTerm | None = None) -> ProbeReward:
    """The probe reward named by ``rl.reward``: what the daemon's engine and the toy benchmark both train on.

    ``calibration_texts`` (reference texts of a base-policy sample) set the hard gate's floor;
    ``diversity`` (optional) is the repetition penalty subtracted from valid completions, ``topic_share``
    (optional) the penalty on over-represented topics."""
    reward: ProbeReward
    if kind == "hard_gate":
        reward = HardGateReward.calibrated(domain, scorer, calibration_texts, group_size, margin)
    elif kind == "soft_gate":
        reward = SoftGateReward(domain, scorer, group_size)
    elif kind == "probe_only":
        reward = ProbeOnlyReward(domain, scorer, group_size)
    else:
        raise ValueError(f"unknown probe reward {kind!r}: choose one of {', '.join(PROBE_REWARDS)}")
    reward.diversity, reward.topic_share = diversity, topic_share
    return reward


class SolverInTheLoopReward(_LoggedReward):
    """SIL baseline: in-band indicator from ``band.k`` live solver attempts; counts solver trials."""

    __name__ = "solver_in_the_loop"

    def __init__(self, domain: Domain, solver: SolverBackend, band: Band, group_size: int,
                 sampling: Sampling | None = None, invalid_reward: float = -1.0) -> None:
        super().__init__(domain, group_size)
        self.solver = solver
        self.band = band
        self.sampling = sampling or Sampling(seed=0)
        self.invalid_reward = float(invalid_reward)
        self.solver_trials = 0

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        checks = self._validate(prompts, completions)
        valid_idx = [i for i, v in enumerate(checks) if v.valid]
        rewards = [self.invalid_reward] * len(checks)
        answers = self.solver.generate([self.domain.solver_prompt(checks[i].task) for i in valid_idx],
                                       self.band.k, self.sampling) if valid_idx else []
        trials = 0
        for i, row in zip(valid_idx, answers, strict=True):
            outcomes = [grade_outcome(self.domain, checks[i].task, c.text) for c in row]
            trials += len(row)
            label = compute_label(outcomes, self.band)
            if label.in_band is None:
                raise RewardError(f"SIL: only {label.valid_trials} valid solver trials for {checks[i].task.text!r}")
            rewards[i] = 1.0 if label.in_band else 0.0
        self.solver_trials += trials
        return self._record(rewards, [v.valid for v in checks], kwargs, trials=trials)
