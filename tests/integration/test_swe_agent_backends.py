"""The SWE agent as the daemon configures it, against a real scripted OpenAI-compatible HTTP server
that plays the model (no model runs here): ``solver.backend = "swe-agent"`` through the daemon's
spot-check path (``build_spot`` → in-process spot-checks → trials and turns in the store) on verified
bugs of the committed fixture repository; a start whose agent endpoint does not answer (exit 2, one
message, no traceback)."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from curriculum.domains.base import get_domain
from curriculum.domains.swe.cli import fetch_and_preflight
from curriculum.domains.swe.domain import SweDomain
from curriculum.labelling.spotcheck import harvest_labels
from curriculum.store import repo, trajectories
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from daemon.config import PropelConfig, config_from_mapping
from daemon.service.runtime import build_spot
from probes.band import Band
from testkit.servers import free_port, scripted_server

pytestmark = pytest.mark.integration
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "swe_minirepo"
SPECS = {"solved": "minicalc minicalc/core.py::mean binop_change 0",
         "unsolved": "minicalc minicalc/core.py::clamp compare_flip 1",
         "loops": "minicalc minicalc/core.py::safe_div compare_flip 0",
         "too_long": "minicalc minicalc/core.py::running_total remove_assign 2"}


def _label_run(store: Store) -> int:
    """The run the labels belong to (labels are per run; these tasks belong to none)."""
    with store.session() as s:
        return repo.get_or_create_run(s, "spotcheck-labels", "h", {})


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def swe_options(tmp: Path) -> dict[str, Any]:
    """Domain options naming the fixture repository (fetched and preflighted into ``tmp``)."""
    lab = tmp / "lab.toml"
    lab.write_text(f'[[repo]]\nname = "minicalc"\nsource = "path"\npath = "{FIXTURE}"\ntests = ["tests"]\n'
                   'split = "rl-train"\n')
    [pf] = fetch_and_preflight(tmp / "cache", [lab], runner="rlimit", bundled_registry=False)
    assert pf.ok, pf.reason
    return {"cache_dir": str(tmp / "cache"), "registry": [str(lab)], "bundled_registry": False, "runner": "rlimit"}


class Model:
    """The scripted model: what it answers depends on the task in the prompt and on the turn; the
    ``unsolved`` task's second conversation gets HTTP 500 (an infrastructure failure)."""

    def __init__(self, task_of_hash: dict[str, str]) -> None:
        self.task_of_hash = task_of_hash
        self.conversations: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], i: int) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        found = re.search(r"^Task: ([0-9a-f]{16})$", messages[1]["content"], re.MULTILINE)
        task = self.task_of_hash.get(found.group(1) if found else "", "generator")
        turn = sum(1 for m in messages if m["role"] == "assistant")
        with self.lock:
            if turn == 0:
                self.conversations[task] += 1
            failing = task == "unsolved" and turn == 0 and self.conversations[task] == 2
        if failing:
            return 500, {"error": "the server is overloaded"}
        return 200, {"choices": [{"message": {"role": "assistant", **self.message(task, turn)}}]}

    @staticmethod
    def message(task: str, turn: int) -> dict[str, Any]:
        if task == "solved":
            return ({"content": "The sum subtracts.", "tool_calls": [call(
                "edit", path="minicalc/core.py", old="total = total - v", new="total = total + v")]} if turn == 0
                    else {"content": "Fixed: mean adds again."})
        if task == "loops":
            return {"content": "", "tool_calls": [call("view", path="minicalc/core.py")]}
        if task == "too_long":
            return {"content": "", "tool_calls": [call("view", path="minicalc/core.py", start=turn + 1)]}
        if task == "generator":
            return ({"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="acc += v",
                                                        new="acc -= v")]} if turn == 0 else {"content": "Done."})
        return {"content": "I could not find the cause."}


def agent_config(tmp: Path, options: dict[str, Any], url: str, **extra: Any) -> PropelConfig:
    data: dict[str, Any] = {"data_dir": str(tmp / "data"), "domain": {"name": "swe", "options": options},
                            "solver": {"backend": "swe-agent", "base_url": url, "model": "m",
                                       "agent": {"max_steps": 4, "wall_s": 120.0}}}
    for section, values in extra.items():
        data[section] = {**data.get(section, {}), **values}
    return config_from_mapping(data, env={})


def stored_tasks(store: Store, domain: SweDomain) -> dict[str, int]:
    new = []
    for spec in SPECS.values():
        validity = domain.check(domain.parse(spec).task)  # type: ignore[arg-type]
        assert validity.valid, (spec, validity.reason)
        t = validity.task
        new.append(repo.NewTask(t.domain, t.content_hash, t.text, True, t.payload, topic=domain.topic(t)))
    with store.session() as s:
        ids = repo.add_tasks(s, None, new)
    return dict(zip(SPECS, ids, strict=True))


@pytest.mark.long  # 11-14 s on the shared 2-core box (11 sandboxed suite runs)
def test_spotchecks_with_the_swe_agent_backend_record_trials_and_turns(tmp_path: Path,
                                                                        sqlite_store: Store) -> None:
    options = swe_options(tmp_path)
    domain = get_domain("swe", **options)
    assert isinstance(domain, SweDomain)
    ids = stored_tasks(sqlite_store, domain)
    model = Model({domain.parse(spec).task.content_hash[:16]: name for name, spec in SPECS.items()})  # type: ignore[union-attr]
    with scripted_server(model, models=["m"]) as (url, _):
        cfg = agent_config(tmp_path, options, url)
        spot = build_spot(cfg, sqlite_store, SimpleNamespace(domain=domain))
        assert spot.solver_id == "agent:m"
        spot.dispatch([ids["solved"], ids["unsolved"]], 3)  # the daemon's in-process spot-check
        spot.dispatch([ids["loops"], ids["too_long"]], 1)
    with sqlite_store.session() as s:
        rows = s.execute(select(SolverTrial).order_by(SolverTrial.task_id, SolverTrial.attempt)).scalars().all()
        trials = {(r.task_id, r.attempt): (r.outcome, r.reason) for r in rows}
        turns = {key: trajectories.episode_turns(s, key[0], "solver", "agent:m", key[1]) for key in trials}
    assert [trials[(ids["solved"], a)] for a in range(3)] == [("pass", "stop")] * 3
    unsolved = sorted((trials[(ids["unsolved"], a)] for a in range(3)), key=str)  # attempts run concurrently
    assert [o for o, _ in unsolved] == ["fail", "fail", "null"] and unsolved[0][1] == "stop"
    assert (unsolved[2][1] or "").startswith("api_error: HTTP 500"), unsolved  # infrastructure, not a failure
    assert trials[(ids["loops"], 0)] == ("fail", "loop")
    assert trials[(ids["too_long"], 0)] == ("fail", "max_steps")
    first = turns[(ids["solved"], 0)]  # the trajectory, turn by turn
    assert [t["content"] for t in first] == ["The sum subtracts.", "Fixed: mean adds again."]
    assert first[0]["tool_calls"][0]["function"]["name"] == "edit"
    assert first[0]["tool_results"] == ["edited minicalc/core.py"] and first[1]["tool_calls"] == []
    assert len(turns[(ids["loops"], 0)]) == 3 and len(turns[(ids["too_long"], 0)]) == 4
    assert "   2 " in turns[(ids["too_long"], 0)][1]["tool_results"][0]  # view from line 2
    assert sorted(len(turns[(ids["unsolved"], a)]) for a in range(3)) == [0, 1, 1]  # the failed request: no turn
    band = Band(k=3, lo=1, hi=2, min_valid_trials=2)
    labels = harvest_labels(sqlite_store, [ids["solved"], ids["unsolved"]], "agent:m", band,
                            run_id=_label_run(sqlite_store))
    assert (labels[ids["solved"]].solved, labels[ids["solved"]].valid_trials) == (3, 3)
    assert (labels[ids["unsolved"]].solved, labels[ids["unsolved"]].valid_trials) == (0, 2)


def _run(tmp: Path, config: dict[str, Any]) -> Any:
    from daemon.cli.main import cli

    path = tmp / "agent.toml"
    path.write_text(_toml(config))
    return CliRunner().invoke(cli, ["--config", str(path), "run", "--cycles", "1", "--no-api"], env={})


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    out = [f"[{prefix}]"] if prefix and scalars else []
    out += [f"{k} = {json.dumps(v)}" for k, v in scalars.items()]
    for k, v in data.items():
        if isinstance(v, dict):
            out.append(_toml(v, f"{prefix}.{k}" if prefix else k))
    return "\n".join(out) + "\n"


def test_unreachable_or_wrong_agent_endpoint_stops_the_start(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    base = {"data_dir": str(tmp_path / "data"), "domain": {"name": "swe", "options": {
        "cache_dir": str(tmp_path / "none")}}}
    res = _run(tmp_path, {**base, "solver": {"backend": "swe-agent", "base_url": dead, "model": "m"}})
    assert res.exit_code == 2, res.output
    assert f"solver.base_url: nothing answers at {dead}" in res.output and "Traceback" not in res.output
    with scripted_server(lambda body, i: (200, {}), models=["other"]) as (url, _):
        res = _run(tmp_path, {**base, "solver": {"backend": "synthetic-swe"}, "generator": {"agent": {
            "base_url": url, "model": "m", "per_cycle": 1}}})
    assert res.exit_code == 2 and "generator.agent.base_url" in res.output and "does not serve model 'm'" in res.output
    res = _run(tmp_path, {**base, "solver": {"backend": "swe-agent", "model": "m"}})
    assert res.exit_code == 2 and "solver.base_url is required when solver.backend = 'swe-agent'" in res.output
    assert "Traceback" not in res.output


@pytest.mark.slow
@pytest.mark.long  # `transformers serve` start (~20 s) + one graded trial
def test_a_real_openai_compatible_server_takes_the_agents_requests(tmp_path: Path, sqlite_store: Store) -> None:
    """`transformers serve` with a tiny random model (it cannot call tools: the episode ends at its
    first answer): the start check passes, the server accepts the agent's chat request with its
    ``tools``, the trial is graded ``fail`` and its one turn is stored."""
    from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
    from daemon.service.settings import check_endpoints
    from testkit.servers import transformers_serve

    options = swe_options(tmp_path)
    domain = get_domain("swe", **options)
    assert isinstance(domain, SweDomain)
    ids = stored_tasks(sqlite_store, domain)
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    model_dir = save_tiny(tiny_qwen2(tok, hidden_size=64, num_layers=1), tok, tmp_path / "tiny")
    with transformers_serve(model_dir, tmp_path / "serve.log") as url:
        cfg = agent_config(tmp_path, options, url, solver={"model": str(model_dir), "max_tokens": 8})
        check_endpoints(cfg)  # raises ConfigError when the server does not answer
        spot = build_spot(cfg, sqlite_store, SimpleNamespace(domain=domain))
        spot.dispatch([ids["solved"]], 1)
    with sqlite_store.session() as s:
        [trial] = s.scalars(select(SolverTrial)).all()
        turns = trajectories.episode_turns(s, ids["solved"], "solver", f"agent:{model_dir}", 0)
    assert (trial.outcome, trial.reason) == ("fail", "stop")
    assert len(turns) == 1 and turns[0]["tool_calls"] == [] and turns[0]["content"]
