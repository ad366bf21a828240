"""The solver-backend contract.

A solver backend answers prompts: ``generate(prompts, n, sampling)`` returns, for each prompt, a
list of ``n`` completions (strings). A completion that could not be produced (timeout, server
error after retries) is ``None`` at its place, so the spot-check pipeline can record a ``null``
trial with a reason instead of crashing or silently counting a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters shared by every backend (OpenAI names, base units in names)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completion:
    """One solver attempt: the text, or ``None`` with the reason it is missing."""

    text: str | None
    error: str | None = None
    latency_s: float = 0.0
    meta: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class SolverBackend(Protocol):
    """Anything that can answer prompts ``n`` times each."""

    #: Stable identifier stored with every trial (e.g. ``openai:Qwen/Qwen2.5-3B-Instruct``).
    solver_id: str

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        """Return ``n`` completions per prompt, in prompt order."""
        ...
