"""The agent in its two roles: bug generator (a completion for ``SweDomain.parse``) and solver (a
``SolverBackend`` whose trials are agent episodes; an API failure is a ``None`` completion, i.e. a
null trial, not a failed one)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.base import Task
from curriculum.domains.swe.agent import (
    GENERATOR_SYSTEM,
    SOLVER_SYSTEM,
    AgentLimits,
    ChatClient,
    Episode,
    Toolbox,
    episode_patch,
    run_agent,
)
from curriculum.domains.swe.domain import RepoState, SweDomain
from curriculum.domains.swe.patches import git_apply
from curriculum.domains.swe.sandbox import Workspace

_TASK = re.compile(r"^Task: ([0-9a-f]{16})$", re.MULTILINE)


def generate_bug(domain: SweDomain, client: ChatClient, repo: str, limits: AgentLimits | None = None
                 ) -> tuple[Episode, str]:
    """One generator episode on ``repo``; returns the episode and the completion (``repo:`` + diff)."""
    limits = limits or AgentLimits()
    state = domain.repo(repo)
    if not isinstance(state, RepoState):
        raise ValueError(state)
    with Workspace(state.checkout.root) as ws:
        user = (f"Repository {state.checkout.spec.label} is checked out in the current directory. Introduce one "
                "behaviour-changing bug in the library code.")
        episode = run_agent(client, GENERATOR_SYSTEM, user, Toolbox(ws.root, domain.runner, limits), limits)
        episode.patch = episode_patch(state.checkout.root, ws.root)
    return episode, f"repo: {repo}\n{episode.patch}"


class AgentSweSolver:
    """Solver trials as agent episodes on a fresh copy with the bug applied (``SolverBackend``).

    It resolves a solver prompt to its task through the domain's verified-task memo (the prompt's
    ``Task: <id>`` line), like the synthetic solver."""

    def __init__(self, domain: SweDomain, client: ChatClient, limits: AgentLimits | None = None,
                 concurrency: int = 1) -> None:
        self.domain = domain
        self.client = client
        self.limits = limits or AgentLimits()
        self.concurrency = max(1, concurrency)
        self._bound: dict[str, dict[str, object]] = {}
        self.solver_id = f"agent:{client.model}"

    def bind_tasks(self, tasks: Mapping[str, Task]) -> None:
        """The tasks behind the next prompts (prompt → task), given by the spot-check: a worker on
        another host has the repository cache but not the daemon's task memo."""
        self._bound = {prompt: dict(task.payload) for prompt, task in tasks.items()}

    def _record(self, prompt: str) -> dict[str, object] | None:
        bound = self._bound.get(prompt)
        if bound is not None:
            return {"payload": bound}
        match = _TASK.search(prompt)
        found = sorted((self.domain.cache.root / "tasks").glob(f"{match.group(1)}*.json")) if match else []
        return json.loads(found[0].read_text()) if found else None

    def _attempt(self, prompt: str) -> Completion:
        record = self._record(prompt)
        if record is None:
            return Completion(None, error="agent solver: unknown task")
        payload = record["payload"]
        assert isinstance(payload, dict)
        state = self.domain.repo(str(payload["repo"]))
        if not isinstance(state, RepoState):
            return Completion(None, error=f"agent solver: {state}")
        with Workspace(state.checkout.root) as ws:
            if git_apply(ws.root, str(payload["patch"])) is not None:
                return Completion(None, error="agent solver: the bug no longer applies")
            bugged = Workspace(ws.root)
            try:
                episode = run_agent(self.client, SOLVER_SYSTEM, prompt, Toolbox(ws.root, self.domain.runner,
                                                                               self.limits), self.limits)
                fix = episode_patch(bugged.root, ws.root)
            finally:
                bugged.close()
        meta = {"stop_reason": episode.stop_reason, "steps": episode.steps, "agent_s": episode.agent_s,
                "tool_s": episode.tool_s, "turns": episode.turns}
        if episode.stop_reason.startswith("api_error"):
            return Completion(None, error=episode.stop_reason, meta=meta)
        return Completion(f"```diff\n{fix}```\n", latency_s=episode.agent_s + episode.tool_s, meta=meta)

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        """``n`` episodes per prompt, ``concurrency`` at a time (each on its own copy), in order."""
        flat = self._episodes([prompt for prompt in prompts for _ in range(n)])
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    def generate_attempts(self, prompts: list[str], attempts: list[int], sampling: Sampling) -> list[Completion]:
        """One episode per (prompt, attempt), ``concurrency`` at a time: every episode is an independent
        run, so the attempt index only places it (sequential labelling asks for one attempt at a time)."""
        if len(prompts) != len(attempts):
            raise ValueError(f"{len(prompts)} prompts but {len(attempts)} attempt indices")
        return self._episodes(list(prompts))

    def _episodes(self, jobs: list[str]) -> list[Completion]:
        if self.concurrency == 1:
            return [self._attempt(prompt) for prompt in jobs]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._attempt, jobs))
