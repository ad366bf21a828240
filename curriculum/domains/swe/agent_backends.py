"""The SWE agent as configured service parts: the ``swe-agent`` solver backend (built by
:func:`curriculum.solvers.build_solver` in the daemon and on Celery workers alike), the endpoint
check a start runs first, and :class:`AgentBugSupply`, the agent generator that adds bugs to the
daemon's cycles.

Neither part has met a real model here: they are tested against a scripted OpenAI-compatible HTTP
server that plays the model (tests/integration/test_swe_agent_backends.py).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from curriculum.domains.swe.agent import AgentLimits, ChatClient
from curriculum.domains.swe.agent_roles import AgentSweSolver, generate_bug
from curriculum.domains.swe.domain import SweDomain
from curriculum.sandbox.base import Limits

log = logging.getLogger("propel.swe.agent")


def agent_limits(max_steps: int = 25, wall_s: float = 900.0, repeat_limit: int = 3, tool_output_chars: int = 4000,
                 tool_timeout_s: float = 60.0) -> AgentLimits:
    """:class:`AgentLimits` from plain settings (``[solver.agent]`` / ``[generator.agent]``)."""
    tool = Limits(cpu_s=max(1, int(tool_timeout_s)), wall_s=tool_timeout_s, memory_mb=2048, max_procs=64)
    return AgentLimits(max_steps=max_steps, wall_s=wall_s, repeat_limit=repeat_limit,
                       tool_output_chars=tool_output_chars, tool=tool)


def check_endpoint(base_url: str, model: str, timeout_s: float = 10.0, api_key: str | None = None) -> str | None:
    """Why ``base_url`` cannot serve ``model`` (nothing answers, it refuses the credentials, or its
    ``/models`` list lacks the model), or None.

    A server that answers ``/models`` with anything else (no such route, or an error: `transformers
    serve` answers 500 there when the model is a local directory) passes: it is up."""
    url = base_url.rstrip("/") + "/models"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError as err:
        return f"nothing answers at {base_url} ({type(err).__name__}: {str(err)[:120] or 'no detail'})"
    if resp.status_code in (401, 403):
        return f"{url} refused the request (HTTP {resp.status_code})"
    if resp.status_code != 200:
        return None
    try:
        served = [str(m["id"]) for m in resp.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if served and model not in served:
        return f"{base_url} does not serve model {model!r} (it serves: {', '.join(served[:5])})"
    return None


def build_agent_solver(base_url: str, model: str, *, domain_options: dict[str, Any] | None = None,
                       limits: dict[str, Any] | None = None, timeout_s: float = 300.0, temperature: float = 0.7,
                       max_tokens: int = 2048, concurrency: int = 1, api_key: str | None = None) -> AgentSweSolver:
    """The ``swe-agent`` solver backend: each trial an agent episode on a fresh bugged copy of the
    repository of the configured SWE domain (``domain_options``: the same as ``[domain.options]``)."""
    domain = SweDomain(**(domain_options or {}))
    client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, temperature=temperature,
                        max_tokens=max_tokens)
    return AgentSweSolver(domain, client, agent_limits(**(limits or {})), concurrency=concurrency)


@dataclass(frozen=True)
class SuppliedBug:
    """One agent generator episode: the completion for ``SweDomain.parse`` and how it went."""

    completion: str
    source: str  # e.g. ``agent:Qwen/Qwen2.5-Coder-32B-Instruct``
    repo: str
    stop_reason: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


class AgentBugSupply:
    """Agent-written bugs for the daemon's cycles, produced in the background.

    ``take(seed)`` returns the episodes finished since the last call and starts new ones until
    ``per_cycle`` are under way, so the driver never waits for a model: a cycle takes what has
    landed (the first cycle none). Episodes run on daemon threads (a stopping daemon does not wait
    for them). An episode that fails (API error, crash) is logged and dropped: it is not a task."""

    def __init__(self, domain: SweDomain, client: ChatClient, per_cycle: int, limits: AgentLimits | None = None,
                 concurrency: int = 1) -> None:
        self.domain, self.client, self.per_cycle = domain, client, per_cycle
        self.limits = limits or AgentLimits()
        self.source = f"agent:{client.model}"
        self._jobs: queue.Queue[int | None] = queue.Queue()
        self._done: queue.Queue[SuppliedBug] = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self.failed: list[str] = []
        self._threads = [threading.Thread(target=self._work, name=f"swe-agent-gen-{i}", daemon=True)
                         for i in range(concurrency)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while (seed := self._jobs.get()) is not None:
            try:
                bug = self._episode(seed)
                if bug is not None:
                    self._done.put(bug)
            except Exception as err:  # one bad episode must not stop the supply; it is reported
                log.warning("agent generator episode failed: %s", err)
                self.failed.append(f"{type(err).__name__}: {err}")
            finally:
                with self._lock:
                    self._in_flight -= 1

    def _episode(self, seed: int) -> SuppliedBug | None:
        usable = self.domain.usable_repos()
        if not usable:
            self.failed.append("no usable repository")
            return None
        repo = random.Random(seed).choice(sorted(usable))
        episode, completion = generate_bug(self.domain, self.client, repo, self.limits)
        if episode.stop_reason.startswith("api_error"):
            self.failed.append(episode.stop_reason)
            log.warning("agent generator: %s", episode.stop_reason)
            return None
        meta = {"stop_reason": episode.stop_reason, "steps": episode.steps, "agent_s": round(episode.agent_s, 3),
                "tool_s": round(episode.tool_s, 3)}
        return SuppliedBug(completion, self.source, repo, episode.stop_reason, list(episode.turns), meta)

    def take(self, seed: int) -> list[SuppliedBug]:
        """Finished episodes (oldest first); then top the work up to ``per_cycle`` episodes under way."""
        out: list[SuppliedBug] = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        with self._lock:
            start = self.per_cycle - self._in_flight
            self._in_flight += max(0, start)
        for i in range(max(0, start)):
            self._jobs.put(seed * 1009 + i)
        return out

    def ready(self) -> int:
        """Finished episodes waiting for the next :meth:`take`."""
        return self._done.qsize()

    def close(self) -> None:
        """Stop the threads after their current episode (queued ones are dropped)."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
