"""A synthetic solver with null attempts, for tests of labelling with infrastructure failures.

:class:`FlakySolver` wraps a backend that can run single attempts (the synthetic instruments) and turns a
seeded share of its attempts into ``Completion(None, …)`` — the same attempts whether asked for all ``k``
at once (``generate``) or one at a time (``generate_attempts``), as a real flaky endpoint would not be, but
as a comparison of full-``k`` and sequential labelling for *the same attempt outcomes* needs.
"""

from __future__ import annotations

import hashlib

from curriculum.common.solver_api import Completion, Sampling, SolverBackend, attempt_runner


class FlakySolver:
    def __init__(self, inner: SolverBackend, null_share: float, seed: int = 0) -> None:
        runner = attempt_runner(inner)
        if runner is None:
            raise ValueError("FlakySolver needs a backend that runs single attempts")
        self.inner, self.runner, self.null_share, self.seed = inner, runner, null_share, seed
        self.solver_id = f"flaky({null_share:g}):{inner.solver_id}"
        self.attempts_run = 0

    def _null(self, prompt: str, attempt: int) -> bool:
        digest = hashlib.sha256(f"{self.seed}|{attempt}|{prompt}".encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.null_share

    def _flaky(self, prompts: list[str], attempts: list[int], comps: list[Completion]) -> list[Completion]:
        self.attempts_run += len(comps)
        return [Completion(None, error="HTTP 503 after retries") if self._null(p, a) else c
                for p, a, c in zip(prompts, attempts, comps, strict=True)]

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        rows = self.inner.generate(prompts, n, sampling)
        return [self._flaky([p] * n, list(range(n)), row) for p, row in zip(prompts, rows, strict=True)]

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        return self._flaky(prompts, attempts, self.runner(prompts, attempts, sampling))


class BatchedOnly:
    """A backend that samples a prompt's attempts as one batch (like ``openai``/``hf``): no single attempts."""

    def __init__(self, inner: SolverBackend) -> None:
        self.inner, self.solver_id = inner, inner.solver_id

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        return self.inner.generate(prompts, n, sampling)


__all__ = ["BatchedOnly", "FlakySolver"]
