"""`propel run --domain swe` with both agent backends pointed at an OpenAI-compatible server — a
scripted one in this process that plays the models (no model can run here): ``solver.backend =
"swe-agent"`` labels the first probe's corpus and the spot-checks, ``[generator.agent]`` adds an
agent-written bug to the cycles. The daemon process runs as in production; the test reads the store.

The scripted solver is an oracle: it looks the bug up in the repository cache's task memo and undoes
it with the ``edit`` tool in the first conversation on about half of the tasks (so labels are mixed),
and gives up otherwise."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from curriculum.rl.bootstrap import bootstrap
from curriculum.store import trajectories
from curriculum.store.db import Store
from curriculum.store.models import AgentTurn, QueueItem, SolverTrial, TaskRow
from testkit.servers import scripted_server
from tests.e2e.conftest import run_state, start_daemon
from tests.e2e.test_swe_run import TINY
from tests.integration.test_swe_agent_backends import _toml, call, swe_options

pytestmark = [pytest.mark.slow, pytest.mark.long]  # a tiny bootstrap + 2 cycles with agent trials: minutes


def undo(patch: str) -> dict[str, Any]:
    """The ``edit`` call that reverts a one-hunk bug patch."""
    path = next(line[6:] for line in patch.splitlines() if line.startswith("+++ b/"))
    old = [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    new = [line[1:] for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")]
    return call("edit", path=path, old="\n".join(old), new="\n".join(new))


class Models:
    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.conversations: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], i: int) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if body["model"] == "g":
            return self.reply({"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="acc += v",
                                                                    new="acc -= v")]} if turn == 0 else
                              {"content": "Done."})
        task = messages[1]["content"].rsplit("Task: ", 1)[-1][:16]
        with self.lock:
            if turn == 0:
                self.conversations[task] += 1
            first = self.conversations[task] == 1
        memo = sorted((self.cache / "tasks").glob(f"{task}*.json"))
        if turn == 0 and first and memo and int(task, 16) % 2 == 0:
            patch = json.loads(memo[0].read_text())["payload"]["patch"]
            return self.reply({"content": "", "tool_calls": [undo(patch)]})
        return self.reply({"content": "Fixed." if turn else "I could not find the cause."})

    @staticmethod
    def reply(message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"choices": [{"message": {"role": "assistant", **message}}]}


def test_propel_run_with_agent_solver_and_generator(tmp_path: Path) -> None:
    options = swe_options(tmp_path)
    gen = bootstrap("swe", tmp_path / "models", settings=TINY, show_progress=False, domain_options=options)
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    log = tmp_path / "daemon.log"
    with scripted_server(Models(Path(str(options["cache_dir"]))), models=["g", "s"]) as (url, _):
        config = tmp_path / "swe_agent.toml"
        config.write_text(_toml({
            "data_dir": str(tmp_path / "data"), "run_name": "sweagent", "store": {"url": db},
            "domain": {"name": "swe", "options": options},
            "generator": {"model": str(gen.path), "max_new_tokens": 64,
                          "agent": {"base_url": url, "model": "g", "per_cycle": 1, "max_steps": 4}},
            "solver": {"backend": "swe-agent", "base_url": url, "model": "s", "max_concurrency": 2,
                       "agent": {"max_steps": 4, "wall_s": 120.0}},
            "daemon": {"sample_size": 8, "tick_interval_s": 0.05, "heartbeat_s": 1.0, "lease_ttl_s": 4.0},
            "alerts": {"sample_size": 8}, "probes": {"train_samples": 48},
            "rl": {"steps_per_chunk": 1, "batch_size": 4, "num_generations": 2},
            "spotcheck": {"budget_per_cycle": 3}, "emission": {"min_probability": 0.0, "max_topic_share": 1.0}}))
        proc = start_daemon(config, log, "--cycles", "2", "--no-api")
        assert proc.wait(timeout=900) == 0, log.read_text()[-4000:]
    out = log.read_text()
    assert "domain swe · solver swe-agent" in out and "Traceback" not in out
    assert "with agent:s to train the first probe" in out  # the first probe's corpus labelled by agent trials
    store = Store(db)
    try:
        assert run_state(store, "sweagent")[:2] == ("rl", 2)
        with store.session() as s:
            trials = s.scalars(select(SolverTrial)).all()
            agent_tasks = s.scalars(select(TaskRow).where(TaskRow.generator_step.is_(None))).all()
            solver_turns = s.scalars(select(AgentTurn).where(AgentTurn.role == "solver")).all()
            [bug] = [t for t in agent_tasks if t.payload.get("generator") == "agent:g"]
            generator_turns = trajectories.episode_turns(s, bug.id, "generator", "agent:g")
            messages = [q.message for q in s.scalars(select(QueueItem))]
    finally:
        store.dispose()
    assert trials and {t.solver_id for t in trials} == {"agent:s"}
    assert {t.reason for t in trials} <= {"stop"} and {t.outcome for t in trials} <= {"pass", "fail"}
    assert {(t.task_id, t.attempt) for t in trials} == {(t.task_id, t.attempt) for t in solver_turns}
    assert bug.valid and bug.cycle == 1 and bug.payload["agent"]["stop_reason"] == "stop"
    assert [t["tool_results"] for t in generator_turns] == [["edited minicalc/core.py"], []]
    assert messages and all(m["grading"]["issue"] for m in messages)
