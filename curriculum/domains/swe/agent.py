"""A multi-turn tool-calling agent over the OpenAI-compatible chat API (vLLM, SGLang, ...), used
as the SWE bug *generator* (edit library code so tests fail) and as the *solver* (repair it).

Tools: ``bash`` (one command in the episode sandbox: the runner's ``shell``), ``view`` (a file
with line numbers, optionally a line range) and ``edit`` (replace one exact, unique snippet).
Paths are confined to the episode copy. The episode ends with a recorded ``stop_reason``:
``stop`` (the model answered without tool calls), ``max_steps``, ``loop`` (the same tool call
``repeat_limit`` times in a row), ``time`` (wall-clock budget) or ``api_error: ...``. Every turn is
kept in ``Episode.turns`` (assistant text, tool calls, tool results) for trajectory probes.
The patch is the diff of every changed ``.py`` file against the tree the episode started from.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from curriculum.domains.swe.patches import diff_trees
from curriculum.domains.swe.sandbox import REPORT_DIR, SuiteRunner
from curriculum.sandbox.base import Limits

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "bash", "description": "Run a bash command in the repository root.",
                                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                     "required": ["command"]}}},
    {"type": "function", "function": {"name": "view", "description": "Show a file with line numbers.",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}, "start": {"type": "integer"},
                                          "end": {"type": "integer"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "edit", "description": "Replace one exact, unique snippet in a file.",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}, "old": {"type": "string"},
                                          "new": {"type": "string"}}, "required": ["path", "old", "new"]}}},
]
GENERATOR_SYSTEM = ("You are a software engineer writing a realistic bug into a Python repository for a debugging "
                    "exercise. Change library code (never tests) so that some existing tests fail while most still "
                    "pass. Use the tools; reply with a short summary and no tool call when done.")
SOLVER_SYSTEM = ("You are a software engineer fixing a bug in a Python repository. Do not edit tests. Use the tools; "
                 "reply with a short summary and no tool call when the fix is done.")


@dataclass(frozen=True)
class AgentLimits:
    max_steps: int = 25
    wall_s: float = 900.0
    repeat_limit: int = 3
    tool_output_chars: int = 4000
    tool: Limits = field(default_factory=lambda: Limits(cpu_s=60, wall_s=60.0, memory_mb=2048, max_procs=64))


@dataclass
class Episode:
    turns: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = ""
    patch: str = ""
    steps: int = 0
    agent_s: float = 0.0
    tool_s: float = 0.0


class ChatClient:
    """``POST {base_url}/chat/completions`` with tools; errors are returned as strings.

    One ``httpx.Client`` (thread-safe, keep-alive) serves every request of every episode: a client made
    per request (``httpx.post``) builds a new TLS context and connection each time, 48 ms against 4 ms
    per request on this machine (``benchmarks/swe_agent_episode.py``)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 300.0,
                 temperature: float = 0.7, max_tokens: int = 2048) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._http = httpx.Client(headers=self.headers, timeout=timeout_s)

    def complete(self, messages: list[dict[str, Any]]) -> dict[str, Any] | str:
        body = {"model": self.model, "messages": messages, "tools": TOOLS, "temperature": self.temperature,
                "max_tokens": self.max_tokens}
        try:
            resp = self._http.post(self.url, json=body)
        except httpx.HTTPError as err:
            return f"{type(err).__name__}: {err}"
        if resp.status_code != 200:
            return f"HTTP {resp.status_code}: {resp.text[:200]}"
        try:
            message: dict[str, Any] = resp.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            return f"malformed response: {resp.text[:200]}"
        return message


class Toolbox:
    """The three tools over one episode copy."""

    def __init__(self, root: Path, runner: SuiteRunner, limits: AgentLimits) -> None:
        self.root = root.resolve()
        self.runner = runner
        self.limits = limits

    def _path(self, rel: str) -> Path | str:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root) or REPORT_DIR in path.parts:
            return f"error: {rel!r} is outside the repository"
        return path

    def call(self, name: str, args: dict[str, Any]) -> str:
        try:
            if name == "bash":
                result = self.runner.shell(self.root, str(args["command"]), self.limits.tool)
                out = f"exit {result.returncode} ({result.status})\n{result.stdout}{result.stderr}"
            elif name == "view":
                out = self._view(str(args["path"]), args.get("start"), args.get("end"))
            elif name == "edit":
                out = self._edit(str(args["path"]), str(args["old"]), str(args["new"]))
            else:
                out = f"error: unknown tool {name!r}"
        except (KeyError, TypeError, ValueError) as err:
            out = f"error: bad arguments for {name}: {err}"
        return out[: self.limits.tool_output_chars]

    def _view(self, rel: str, start: Any, end: Any) -> str:
        path = self._path(rel)
        if isinstance(path, str) or not path.is_file():
            return path if isinstance(path, str) else f"error: no file {rel}"
        lines = path.read_text(errors="replace").splitlines()
        lo, hi = int(start or 1), int(end or len(lines))
        return "\n".join(f"{i:5d} {line}" for i, line in enumerate(lines[lo - 1:hi], start=lo))

    def _edit(self, rel: str, old: str, new: str) -> str:
        path = self._path(rel)
        if isinstance(path, str) or not path.is_file():
            return path if isinstance(path, str) else f"error: no file {rel}"
        text = path.read_text()
        count = text.count(old) if old else 0
        if count != 1:
            return f"error: the snippet occurs {count} times in {rel}; it must occur exactly once"
        path.write_text(text.replace(old, new, 1))
        return f"edited {rel}"


def _call_key(call: dict[str, Any]) -> str:
    fn = call.get("function", {})
    return f"{fn.get('name')}|{fn.get('arguments')}"


def run_agent(client: ChatClient, system: str, user: str, toolbox: Toolbox, limits: AgentLimits) -> Episode:
    """The tool loop; see the module docstring for how it ends."""
    episode = Episode()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    started = time.monotonic()
    recent: list[str] = []
    while True:
        if episode.steps >= limits.max_steps:
            episode.stop_reason = "max_steps"
            break
        if time.monotonic() - started > limits.wall_s:
            episode.stop_reason = "time"
            break
        message = client.complete(messages)
        if isinstance(message, str):
            episode.stop_reason = f"api_error: {message}"
            break
        episode.steps += 1
        calls = message.get("tool_calls") or []
        turn: dict[str, Any] = {"content": message.get("content") or "", "tool_calls": calls, "tool_results": []}
        episode.turns.append(turn)
        messages.append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls}
                        if calls else {"role": "assistant", "content": message.get("content") or ""})
        if not calls:
            episode.stop_reason = "stop"
            break
        for call in calls:
            recent = [*recent, _call_key(call)][-limits.repeat_limit:]
            fn = call.get("function", {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = None
            tool_started = time.monotonic()
            result = (toolbox.call(str(fn.get("name")), args) if isinstance(args, dict)
                      else "error: arguments are not a JSON object")
            episode.tool_s += time.monotonic() - tool_started
            turn["tool_results"].append(result)
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
        if len(recent) == limits.repeat_limit and len(set(recent)) == 1:
            episode.stop_reason = "loop"
            break
    episode.agent_s = time.monotonic() - started - episode.tool_s
    return episode


def changed_py_files(before: Path, after: Path) -> list[str]:
    """Repository-relative ``.py`` files that differ (or exist on one side only)."""
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.py")
                if REPORT_DIR not in p.relative_to(root).parts and "__pycache__" not in p.parts}
    one, two = files(before), files(after)
    return sorted(p for p in set(one) | set(two) if one.get(p) != two.get(p))


def episode_patch(before: Path, after: Path) -> str:
    return diff_trees(before, after, changed_py_files(before, after))
