"""Synthetic SWE solver — a BENCHMARK INSTRUMENT, not a model; its ``solver_id`` starts with
``synthetic:``.

It reads the task id from an SWE solver prompt, looks the verified task up in the domain's task
memo (``<cache>/tasks/<hash>.json``, written by ``SweDomain.check``) and succeeds with probability
``sigmoid(slope * (offset - difficulty))``. ``difficulty`` is a function of bug features only:

    difficulty = OPERATOR_DIFFICULTY[operator] + 0.8 * ln(1 + changed lines) - 0.7 * ln(fail-to-pass tests)

(more failing tests = more signal = easier; bigger edits and subtle operators = harder). A success
answers the reference fix (the reverse patch) in a diff block, which the domain then really grades
by running the suite; a failure answers prose without a diff (graded ``False``). Draws are seeded
by (solver seed, sampling seed, prompt, attempt).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from pathlib import Path

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.swe.cache import RepoCache

OPERATOR_DIFFICULTY = {
    "remove_loop": 0.5, "remove_if": 1.0, "remove_assign": 1.0, "invert_if": 1.0, "remove_not": 1.0,
    "bool_flip": 1.2, "boolop_swap": 1.5, "compare_flip": 1.5, "binop_change": 1.5, "operand_swap": 2.0,
    "compare_boundary": 2.5, "const_inc": 2.5, "const_dec": 2.5, "patch": 2.0,
}
_TASK = re.compile(r"^Task: ([0-9a-f]{16})$", re.MULTILINE)


def difficulty(operator: str, patch: str, n_fail_to_pass: int) -> float:
    changed = sum(1 for line in patch.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    return OPERATOR_DIFFICULTY.get(operator, 2.0) + 0.8 * math.log1p(changed) - 0.7 * math.log(max(1, n_fail_to_pass))


class SyntheticSweSolver:
    """Logistic-in-bug-difficulty success; seeded; labelled ``synthetic:``."""

    def __init__(self, cache_dir: str | Path | None = None, slope: float = 2.0, offset: float = 2.5,
                 seed: int = 0) -> None:
        self.tasks_dir = RepoCache(cache_dir).root / "tasks"
        self.slope = slope
        self.offset = offset
        self.seed = seed
        self.solver_id = f"synthetic:swe-logistic(slope={slope:g},offset={offset:g},seed={seed})"

    def _task(self, prompt: str) -> dict[str, object] | str:
        match = _TASK.search(prompt)
        if match is None:
            return "synthetic solver: not an SWE solver prompt (no 'Task: <id>' line)"
        found = sorted(self.tasks_dir.glob(f"{match.group(1)}*.json")) if self.tasks_dir.is_dir() else []
        if not found:
            return f"synthetic solver: task {match.group(1)} not in {self.tasks_dir}"
        record: dict[str, object] = json.loads(found[0].read_text())
        return record

    def success_probability(self, operator: str, patch: str, n_fail_to_pass: int) -> float:
        d = difficulty(operator, patch, n_fail_to_pass)
        return 1.0 / (1.0 + math.exp(-self.slope * (self.offset - d)))

    def _answer(self, prompt: str, attempt: int, sampling: Sampling) -> Completion:
        started = time.perf_counter()
        record = self._task(prompt)
        if isinstance(record, str):
            return Completion(None, error=record)
        payload, verdict = record["payload"], record["verdict"]
        assert isinstance(payload, dict) and isinstance(verdict, dict)
        p = self.success_probability(str(payload.get("operator")), str(payload.get("patch", "")),
                                     len(verdict.get("fail_to_pass", [])))
        key = f"{self.seed}|{sampling.seed}|{attempt}|{prompt}".encode()
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        correct = rng.random() < p
        text = (f"The bug is fixed by this patch:\n```diff\n{verdict['reference_fix']}```\n" if correct
                else "I looked through the code but could not locate the cause of the failures.")
        return Completion(text, latency_s=time.perf_counter() - started,
                          meta={"synthetic": True, "p_correct": p, "correct": correct})

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` answers per prompt, in order (the SolverBackend contract)."""
        return [[self._answer(prompt, i, sampling) for i in range(n)] for prompt in prompts]

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        """Attempt ``attempts[i]`` of ``prompts[i]`` (the answer ``generate`` gives at that place)."""
        return [self._answer(prompt, i, sampling) for prompt, i in zip(prompts, attempts, strict=True)]
