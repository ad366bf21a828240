"""The solver-backend contract.

A solver backend answers prompts: ``generate(prompts, n, sampling)`` returns, for each prompt, a
list of ``n`` completions (strings). A completion that could not be produced (timeout, server
error after retries) is ``None`` at its place, so the spot-check pipeline can record a ``null``
trial with a reason instead of crashing or silently counting a failure.

A backend whose attempts are separate runs — a seeded synthetic instrument, an agent episode each
trial — may also offer ``generate_attempts(prompts, attempts, sampling)``:
one completion per (prompt, attempt index), where attempt ``i`` is the completion ``generate`` gives
at place ``i``. Sequential labelling (``spotcheck.sequential``, docs/PROBES.md) runs a task's attempts
one at a time through it and stops once the label is settled. Backends that sample the ``n``
completions of a prompt in one batched request (``openai``: vLLM ``n=k``; ``hf``:
``num_return_sequences``) do not offer it: see :func:`attempt_runner`.
"""

from __future__ import annotations

from collections.abc import Callable
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


#: ``generate_attempts(prompts, attempts, sampling)``: one completion per (prompt, attempt index) pair.
AttemptRunner = Callable[[list[str], list[int], Sampling], list[Completion]]


def attempt_runner(solver: SolverBackend) -> AttemptRunner | None:
    """The backend's ``generate_attempts``, or ``None`` when it samples a prompt's attempts as one batch.

    Why batched backends are left out: a vLLM request with ``n=k`` decodes the ``k`` samples together
    (one prefill, shared KV cache), so asking again per attempt saves little GPU time and adds a round
    trip per attempt; and with a fixed ``sampling.seed`` a per-attempt request would draw the *same*
    sample each time — a different label from the batch's. Such backends always run all ``k``."""
    runner = getattr(solver, "generate_attempts", None)
    return runner if callable(runner) else None
