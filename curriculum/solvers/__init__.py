"""Solver backends: ``openai`` (vLLM/SGLang/`transformers serve`), ``hf`` (in-process), ``synthetic``
(arith), ``synthetic-swe`` (the SWE domain's benchmark solver) and ``swe-agent`` (the SWE tool-calling
agent over an OpenAI-compatible chat endpoint: each trial a multi-turn episode in the sandbox)."""

from __future__ import annotations

import time
from typing import Any

from curriculum.common.solver_api import AttemptRunner, Completion, Sampling, SolverBackend, attempt_runner

__all__ = ["Completion", "DelayedSolver", "Sampling", "SolverBackend", "build_solver"]


class DelayedSolver:
    """Adds a fixed latency per request to another backend — a stand-in for a slow real solver in
    benchmarks and fault tests (so what is measured is the pipeline, not this machine's CPU)."""

    def __init__(self, inner: SolverBackend, latency_s: float) -> None:
        self.inner = inner
        self.latency_s = latency_s
        self.solver_id = inner.solver_id
        runner = attempt_runner(inner)  # only a backend that can run single attempts offers it here too
        self.generate_attempts: AttemptRunner | None = None if runner is None else self._delayed(runner)

    def _delayed(self, runner: AttemptRunner) -> AttemptRunner:
        def generate_attempts(prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
            time.sleep(self.latency_s)  # one request per round of attempts
            return runner(prompts, attempts, sampling)

        return generate_attempts

    def serve_version(self, version: str) -> None:
        serve = getattr(self.inner, "serve_version", None)
        if serve is not None:
            serve(version)

    def bind_tasks(self, tasks: Any) -> None:
        bind = getattr(self.inner, "bind_tasks", None)
        if bind is not None:
            bind(tasks)

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        time.sleep(self.latency_s)
        return self.inner.generate(prompts, n, sampling)


def build_solver(backend: str, *, model: str | None = None, base_url: str | None = None,
                 timeout_s: float = 120.0, max_concurrency: int = 8, max_retries: int = 3,
                 api_key: str | None = None, artificial_latency_s: float = 0.0, seed: int = 0,
                 options: dict[str, Any] | None = None) -> SolverBackend:
    """Construct a backend by name; import heavy dependencies only for the chosen one."""
    solver: SolverBackend
    if backend == "openai":
        from curriculum.solvers.openai_backend import OpenAICompatibleSolver, RetryPolicy

        if not base_url or not model:
            raise ValueError("the openai solver needs base_url and model")
        solver = OpenAICompatibleSolver(base_url, model, api_key=api_key, timeout_s=timeout_s,
                                        max_concurrency=max_concurrency,
                                        retry=RetryPolicy(max_retries=max_retries), **(options or {}))
    elif backend == "hf":
        from curriculum.solvers.hf import VERSION_FIELD, HFSolver, VersionedHFSolver

        if not model:
            raise ValueError("the hf solver needs a model (hub id or local path)")
        if VERSION_FIELD in model:  # a checkpoint per version, loaded when a spot-check asks for it
            solver = VersionedHFSolver(model, **(options or {}))
        else:
            solver = HFSolver.from_pretrained(model, **{k: v for k, v in (options or {}).items()
                                                        if k not in ("version", "wait_s")})
    elif backend == "synthetic":
        from curriculum.solvers.synthetic import SyntheticArithSolver

        solver = SyntheticArithSolver(seed=seed, **(options or {}))
    elif backend == "synthetic-swe":
        from curriculum.domains.swe.synthetic import SyntheticSweSolver

        solver = SyntheticSweSolver(seed=seed, **(options or {}))
    elif backend == "swe-agent":
        from curriculum.domains.swe.agent_backends import build_agent_solver

        if not base_url or not model:
            raise ValueError("the swe-agent solver needs base_url and model")
        solver = build_agent_solver(base_url, model, timeout_s=timeout_s, concurrency=max_concurrency,
                                    api_key=api_key, **(options or {}))
    else:
        raise ValueError(f"unknown solver backend {backend!r}: use openai, hf, synthetic, synthetic-swe or "
                         "swe-agent")
    return DelayedSolver(solver, artificial_latency_s) if artificial_latency_s > 0 else solver
