"""The tool-calling agent against a real (scripted) OpenAI-compatible HTTP server: generator and
solver episodes on the fixture repository, each way an episode ends, trajectories turn by turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from curriculum.common.solver_api import Sampling
from curriculum.domains.swe.agent import AgentLimits, ChatClient, Toolbox, run_agent
from curriculum.domains.swe.agent_roles import AgentSweSolver, generate_bug
from curriculum.domains.swe.cli import fetch_and_preflight
from curriculum.domains.swe.domain import SweDomain
from curriculum.domains.swe.sandbox import RlimitSuiteRunner, Workspace
from curriculum.labelling.spotcheck import grade_outcome
from testkit.servers import scripted_server

from .conftest import FIXTURE, POLICY, fixture_registry

LIMITS = AgentLimits(max_steps=6, wall_s=120.0)


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def script(turns: list[dict[str, Any]]) -> Callable[[dict[str, object], int], tuple[int, dict[str, object]]]:
    def respond(body: dict[str, object], i: int) -> tuple[int, dict[str, object]]:
        message = turns[min(i, len(turns) - 1)]
        return 200, {"choices": [{"message": {"role": "assistant", **message}}]}
    return respond


@pytest.fixture(scope="module")
def domain(tmp_path_factory: pytest.TempPathFactory) -> SweDomain:
    tmp = tmp_path_factory.mktemp("swe-agent")
    lab = fixture_registry(tmp)
    fetch_and_preflight(tmp / "cache", [lab], runner="rlimit", bundled_registry=False, policy=POLICY)
    return SweDomain(tmp / "cache", [lab], bundled_registry=False, runner="rlimit", policy=POLICY)


def test_generator_episode_yields_a_verified_bug(domain: SweDomain) -> None:
    turns = [
        {"content": "Looking.", "tool_calls": [call("bash", command="grep -n 'acc +=' minicalc/core.py")]},
        {"content": "", "tool_calls": [call("view", path="minicalc/core.py", start=20, end=30)]},
        {"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="acc += v", new="acc -= v")]},
        {"content": "Done: the running total now subtracts."},
    ]
    with scripted_server(script(turns)) as (url, seen):
        episode, completion = generate_bug(domain, ChatClient(url, "m"), "minicalc", LIMITS)
    assert episode.stop_reason == "stop" and episode.steps == 4 and len(episode.turns) == 4
    assert "acc += v" in episode.turns[0]["tool_results"][0] and "exit 0" in episode.turns[0]["tool_results"][0]
    assert "   24" in episode.turns[1]["tool_results"][0]
    assert episode.turns[2]["tool_results"] == ["edited minicalc/core.py"]
    assert seen[0]["tools"] and seen[-1]["messages"][-1]["role"] == "tool"  # type: ignore[index]
    validity = domain.check(domain.parse(completion).task)  # type: ignore[arg-type]
    assert validity.valid, validity.reason


def test_agent_solver_trial_is_graded(domain: SweDomain) -> None:
    task = domain.check(domain.parse("minicalc minicalc/core.py::running_total remove_assign 2").task).task  # type: ignore[arg-type]
    turns = [{"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="    for v in values:\n"
                                                  "        out.append(acc)", new="    for v in values:\n"
                                                  "        acc += v\n        out.append(acc)")]},
             {"content": "Fixed."}]
    with scripted_server(script(turns)) as (url, _):
        solver = AgentSweSolver(domain, ChatClient(url, "m"), LIMITS)
        [[completion]] = solver.generate([domain.solver_prompt(task)], 1, Sampling())
    assert completion.meta["stop_reason"] == "stop" and solver.solver_id == "agent:m"
    assert grade_outcome(domain, task, completion.text) == "pass"
    with scripted_server(lambda body, i: (500, {"error": "down"})) as (url, _):
        [[failed]] = AgentSweSolver(domain, ChatClient(url, "m"), LIMITS).generate([domain.solver_prompt(task)], 1,
                                                                                  Sampling())
    assert failed.text is None and grade_outcome(domain, task, failed.text) == "null"


def _episode(turns: list[dict[str, Any]], tmp_path: Path, limits: AgentLimits = LIMITS):
    with scripted_server(script(turns)) as (url, _), Workspace(FIXTURE, tmp_path) as ws:
        return run_agent(ChatClient(url, "m"), "sys", "user", Toolbox(ws.root, RlimitSuiteRunner(), limits), limits)


def test_episode_endings_are_recorded(tmp_path: Path) -> None:
    same = [{"content": "", "tool_calls": [call("view", path="minicalc/core.py")]}]
    assert _episode(same, tmp_path).stop_reason == "loop"
    varying = [{"content": "", "tool_calls": [call("view", path="minicalc/core.py", start=i)]} for i in range(1, 20)]
    ended = _episode(varying, tmp_path)
    assert ended.stop_reason == "max_steps" and ended.steps == LIMITS.max_steps
    assert _episode(varying, tmp_path, AgentLimits(max_steps=50, wall_s=0.0)).stop_reason == "time"
    with scripted_server(lambda body, i: (200, {"nonsense": True})) as (url, _), Workspace(FIXTURE, tmp_path) as ws:
        bad = run_agent(ChatClient(url, "m"), "s", "u", Toolbox(ws.root, RlimitSuiteRunner(), LIMITS), LIMITS)
    assert bad.stop_reason.startswith("api_error: malformed response")


def test_tools_refuse_bad_input(tmp_path: Path) -> None:
    with Workspace(FIXTURE, tmp_path) as ws:
        tools = Toolbox(ws.root, RlimitSuiteRunner(), LIMITS)
        assert "outside the repository" in tools.call("view", {"path": "../../etc/passwd"})
        assert "occurs 0 times" in tools.call("edit", {"path": "minicalc/core.py", "old": "zzz", "new": "y"})
        many = tools.call("edit", {"path": "minicalc/core.py", "old": "return", "new": "y"})
        assert many.startswith("error: the snippet occurs") and "exactly once" in many
        assert "unknown tool" in tools.call("rm", {})
        assert "bad arguments" in tools.call("edit", {"path": "minicalc/core.py"})
