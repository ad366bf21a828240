"""Synthetic solver for the ``arith`` domain — a BENCHMARK INSTRUMENT, not a model.

It reads the expression out of an arith solver prompt and answers correctly with probability
``sigmoid(slope * (offset - complexity))`` where ``complexity`` is
:func:`curriculum.domains.arith.complexity`; otherwise it answers the true value plus a non-zero
offset in ±1..10 (an off-by-something integer). Draws are seeded by (solver seed, sampling seed,
prompt, attempt index), so the same request gives the same answers and the whole pipeline is
reproducible. Its ``solver_id`` always starts with ``synthetic:`` so its trials can never be
mistaken for a real solver's. :meth:`SyntheticArithSolver.set_skill` raises or lowers its skill in
place (a new checkpoint of the same solver, announced as a new version). ``skill_file`` names a JSON
object ``{version: offset}`` re-read at every :meth:`~SyntheticArithSolver.serve_version` (its
entries win over ``skill_by_version``): a benchmark's fake trainer writes the skill its training
reached there before it announces the version (``benchmarks/closed_loop.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from pathlib import Path

from curriculum.common.fsutil import atomic_write
from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.arith import ArithError, analyse, complexity
from curriculum.domains.base import Task

_PROMPT_EXPR = re.compile(r"Compute:\s*([0-9+\-*() ]+?)\s*(?:\n|$)")


class SyntheticArithSolver:
    """Logistic-in-complexity success probability; seeded; labelled ``synthetic:``."""

    def __init__(self, slope: float = 1.0, offset: float = 6.0, seed: int = 0,
                 skill_by_version: dict[str, float] | None = None, skill_file: str | Path | None = None) -> None:
        self.slope = slope
        self.offset = self.base_offset = offset
        self.seed = seed
        self.skill_by_version = dict(skill_by_version or {})
        self.skill_file = Path(skill_file) if skill_file else None
        self.solver_id = f"synthetic:arith-logistic(slope={slope:g},offset={offset:g},seed={seed})"

    def serve_version(self, version: str) -> None:
        """Act as checkpoint ``version``: its offset from ``skill_by_version`` (else the base offset).
        Spot-checks call this with the version they record trials under (benchmarks of drift).
        With a ``skill_file``, its entries (re-read now) win over ``skill_by_version``."""
        skills = {**self.skill_by_version, **read_skill_file(self.skill_file)}
        self.offset = skills.get(version, self.base_offset)

    def set_skill(self, offset: float) -> None:
        """Change the solver's skill (the complexity at which it succeeds half the time) in place —
        a new checkpoint of the same solver: ``solver_id`` (its name) does not change. It is the skill
        of every version not in ``skill_by_version``."""
        self.offset = self.base_offset = offset

    def success_probability(self, expression: str) -> float:
        """P(correct) for ``expression`` (raises :class:`ArithError` if it does not parse)."""
        c = complexity(Task("arith", expression))
        return 1.0 / (1.0 + math.exp(-self.slope * (self.offset - c)))

    def _rng(self, prompt: str, attempt: int, sampling_seed: int | None) -> random.Random:
        key = f"{self.seed}|{sampling_seed}|{attempt}|{prompt}".encode()
        return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))

    def _answer(self, prompt: str, attempt: int, sampling: Sampling) -> Completion:
        started = time.perf_counter()
        match = _PROMPT_EXPR.search(prompt)
        if match is None:
            return Completion(None, error="synthetic solver: not an arith solver prompt")
        expression = match.group(1).strip()
        try:
            value = analyse(expression).value
            p = self.success_probability(expression)
        except ArithError as err:
            return Completion(None, error=f"synthetic solver: bad expression: {err}")
        rng = self._rng(prompt, attempt, sampling.seed)
        correct = rng.random() < p
        answer = value if correct else value + rng.choice((-1, 1)) * rng.randint(1, 10)
        return Completion(f"The answer is {answer}.", latency_s=time.perf_counter() - started,
                          meta={"synthetic": True, "p_correct": p, "correct": correct})

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` answers per prompt, in order (the SolverBackend contract)."""
        return [[self._answer(prompt, i, sampling) for i in range(n)] for prompt in prompts]

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        """Attempt ``attempts[i]`` of ``prompts[i]`` (the answer ``generate`` gives at that place)."""
        return [self._answer(prompt, i, sampling) for prompt, i in zip(prompts, attempts, strict=True)]


def read_skill_file(path: Path | None) -> dict[str, float]:
    """``{version: offset}`` from a skill file; ``{}`` when there is none yet (a missing file is a solver
    no trainer has announced a version of). A file that is not a JSON object of numbers raises ValueError."""
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    if not isinstance(data, dict) or not all(isinstance(v, int | float) for v in data.values()):
        raise ValueError(f"synthetic skill file {path}: expected a JSON object {{version: offset}}")
    return {str(k): float(v) for k, v in data.items()}


def write_skill_file(path: Path, version: str, offset: float) -> None:
    """Record ``version``'s offset in the skill file (crash-safe; other versions kept)."""
    skills = {**read_skill_file(path), version: float(offset)}
    atomic_write(path, json.dumps(skills, sort_keys=True).encode())
