"""The agent generator in the daemon's cycle: the real Driver on the real store, with
``build_supply`` (``[generator.agent]``) and ``build_spot`` (``solver.backend = "swe-agent"``) from a
config, both against one scripted OpenAI-compatible server that plays the models. An agent-written
bug joins a cycle's sample with its own provenance and its trajectory, is verified, spot-checked by
agent trials and emitted with ``grading.generator`` naming the agent. The engine is a hand-written
fake (no model: the policy writes one fixed spec line and the probe scores a constant)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from curriculum.domains.base import Validity, get_domain
from curriculum.domains.swe.agent_backends import AgentBugSupply
from curriculum.domains.swe.domain import SweDomain
from curriculum.store import repo, trajectories
from curriculum.store.db import Store
from curriculum.store.lineage import EnsembleSpec
from curriculum.store.models import QueueItem, SolverTrial, TaskRow
from daemon.loop.driver import Driver, DriverSettings
from daemon.loop.ports import ReferenceInfo, Rollouts, Scored
from daemon.service.runtime import build_spot, build_supply
from probes.band import Band
from testkit.driver import QueuedRetrainer
from testkit.servers import scripted_server
from tests.integration.test_swe_agent_backends import agent_config, call, swe_options

pytestmark = pytest.mark.integration
POLICY_SPEC = "minicalc minicalc/core.py::mean binop_change 0"


class SpecEngine:
    """The model side, faked: the policy always writes :data:`POLICY_SPEC`; every task scores 0.9."""

    def __init__(self, domain: SweDomain) -> None:
        self.domain = domain

    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        return {"steps": float(steps)}

    def sample(self, n: int, seed: int) -> list[str]:
        return [POLICY_SPEC] * n

    def rollouts(self) -> Rollouts:
        return Rollouts([], 0, 0)

    def score(self, texts: Sequence[str]) -> Scored:
        return Scored([2.0] * len(texts), [0.9] * len(texts), EnsembleSpec("min", ("file:///p",), ()))

    def rewards(self, checks: Sequence[Validity], scored: Scored | None) -> list[float]:
        return [0.0] * len(checks)

    def provenance(self) -> dict[str, Any]:
        return {"generator_step": 5, "adapter_hash": "a5", "probe_ensemble_id": "e", "reference_fingerprint": "r"}

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        return None

    def reference_info(self) -> ReferenceInfo:
        return ReferenceInfo("tiny", "r", 0, "last_token")

    def observe_emitted(self, texts: Sequence[str], topics: Sequence[str | None]) -> None:
        return None


class Models:
    """``g`` writes a bug (running_total subtracts); ``s``, in the first conversation on each task,
    tries the fix of that bug (it fixes the agent's bug, and not the policy's: 1 and 0 solves of 3)
    and gives up in the others."""

    def __init__(self) -> None:
        self.conversations: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], i: int) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if body["model"] == "g":
            message = ({"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="acc += v",
                                                            new="acc -= v")]} if turn == 0 else {"content": "Done."})
            return 200, {"choices": [{"message": {"role": "assistant", **message}}]}
        task = messages[1]["content"].rsplit("Task: ", 1)[-1][:16]
        with self.lock:
            if turn == 0:
                self.conversations[task] += 1
            first = self.conversations[task] == 1
        if turn == 0 and first:
            message = {"content": "", "tool_calls": [call("edit", path="minicalc/core.py", old="acc -= v",
                                                          new="acc += v")]}
        else:
            message = {"content": "Fixed." if turn else "I could not find the cause."}
        return 200, {"choices": [{"message": {"role": "assistant", **message}}]}


def test_agent_bugs_join_the_cycle_with_their_provenance_and_turns(tmp_path: Path, sqlite_store: Store) -> None:
    options = swe_options(tmp_path)
    domain = get_domain("swe", **options)
    assert isinstance(domain, SweDomain)
    engine = SpecEngine(domain)
    with scripted_server(Models(), models=["g", "s"]) as (url, _):
        cfg = agent_config(tmp_path, options, url, solver={"model": "s", "max_concurrency": 1},
                           generator={"agent": {"base_url": url, "model": "g", "per_cycle": 1, "max_steps": 4}})
        supply = build_supply(cfg, engine)  # type: ignore[arg-type]
        assert isinstance(supply, AgentBugSupply)
        with sqlite_store.session() as s:
            run_id = repo.get_or_create_run(s, "agentgen", "h", {})
            pid = repo.register_probe(s, "primary", "primary", "file:///p", "r", {}, run_id=run_id)
            repo.set_active_probes(s, [pid], run_id)
        settings = DriverSettings(run_name="agentgen", sample_size=2, band=Band(3, 1, 2, 2), budget_per_cycle=4,
                                  min_probability=0.0, max_topic_share=1.0, diversity_sample_size=2)
        driver = Driver(sqlite_store, run_id, engine, build_spot(cfg, sqlite_store, engine),  # type: ignore[arg-type]
                        QueuedRetrainer(), settings, supply=supply)
        try:
            assert supply.take(0) == []  # starts one episode in the background
            deadline = time.monotonic() + 60
            while supply.ready() < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert supply.ready() == 1, supply.failed
            reports = [driver.tick() for _ in range(5)]  # rl, sample, spotcheck, retrain, emit
        finally:
            supply.close()
    assert [r.phase for r in reports] == ["rl", "sample", "spotcheck", "retrain", "emit"]
    assert reports[1].values["supplied"] == 1.0 and reports[1].values["supplied_valid"] == 1.0
    with sqlite_store.session() as s:
        tasks = {t.id: t for t in s.scalars(select(TaskRow).where(TaskRow.run_id == run_id))}
        [agent_task] = [t for t in tasks.values() if t.payload.get("generator") == "agent:g"]
        [policy_task] = [t for t in tasks.values() if t.id != agent_task.id]
        turns = trajectories.episode_turns(s, agent_task.id, "generator", "agent:g")
        outcomes = sorted(r.outcome for r in s.scalars(select(SolverTrial).where(
            SolverTrial.task_id == agent_task.id)))
        messages = {q.task_id: q.message for q in s.scalars(select(QueueItem))}
    assert agent_task.valid and agent_task.generator_step is None and agent_task.adapter_hash is None
    assert agent_task.payload["agent"]["stop_reason"] == "stop" and agent_task.payload["operator"] == "patch"
    assert (policy_task.generator_step, policy_task.payload.get("generator")) == (5, None)
    assert [t["tool_results"] for t in turns] == [["edited minicalc/core.py"], []]
    assert outcomes == ["fail", "fail", "pass"]  # in band: 1 of 3
    assert list(messages) == [agent_task.id]  # the policy's bug was never solved: out of band, not emitted
    message = messages[agent_task.id]
    assert message["grading"]["generator"] == "agent:g" and message["spot_check"]["in_band"] is True
    assert message["provenance"]["generator_step"] is None
