"""SWE trajectory probe inputs and ``propel probes sweep --split grouped --turn-poolings`` on a corpus of
bugs from the fixture repository (spec lines of its spec space under three repository names)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
from curriculum.domains.base import Task
from curriculum.domains.swe.mutator import enumerate_specs
from curriculum.domains.swe.synthetic import OPERATOR_DIFFICULTY
from curriculum.domains.swe.trajectory import bug_probe_input, episode_trajectory, turn_text
from probes.cli import probes
from probes.inputs import Trajectory

from .conftest import FIXTURE

TURNS: list[dict[str, Any]] = [
    {"content": "Look at the code.", "tool_calls": [{"function": {"name": "view", "arguments": '{"path": "a.py"}'}}],
     "tool_results": ["def f(x):\n    return x + 1\n"]},
    {"content": "", "tool_calls": [{"function": {"name": "edit", "arguments": '{"old": "+", "new": "-"}'}}],
     "tool_results": ["edited"]},
    {"content": "repo: minicalc\n--- a/a.py", "tool_calls": [], "tool_results": []},
]


def test_episode_trajectory_spans_are_the_agent_turns() -> None:
    traj = episode_trajectory(TURNS, prompt="Break something.")
    assert len(traj.turns) == 3
    spans = [traj.text[a:b] for a, b in traj.turns]
    assert spans == [turn_text(t) for t in TURNS]
    assert spans[1] == 'edit({"old": "+", "new": "-"})'  # a turn with tool calls only
    assert "def f(x)" in traj.text and "def f(x)" not in "".join(spans)  # tool results are context


class _Domain:
    def reference_text(self, task: Task) -> str:
        return str(task.payload["spec"])


def test_bug_probe_input_handles_both_generators() -> None:
    task = Task("swe", "minicalc minicalc/core.py::f remove_if 0", {"spec": "minicalc minicalc/core.py::f remove_if 0"})
    assert bug_probe_input(_Domain(), task) == task.payload["spec"]  # type: ignore[arg-type]  # spec generator: one turn
    assert isinstance(bug_probe_input(_Domain(), task, TURNS), Trajectory)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Spec lines of the fixture's spec space as three "repositories", labelled by operator difficulty
    (a stand-in for solver trials), half of them as one-turn spec lines and half as trajectories."""
    specs = enumerate_specs(FIXTURE, "minicalc")
    rows = []
    for i, spec in enumerate(specs * 2):
        repo = f"minicalc{i % 3}"
        line = spec.render().replace("minicalc ", f"{repo} ", 1)
        solves = 1 if OPERATOR_DIFFICULTY[spec.operator] >= 1.5 else 3
        row: dict[str, object] = {"text": line, "solves": solves, "k": 3, "group": repo}
        if i % 2:
            traj = episode_trajectory([{"content": line, "tool_calls": [], "tool_results": ["1 test fails"]},
                                       {"content": f"repo: {repo}", "tool_calls": [], "tool_results": []}])
            row |= {"text": traj.text, "turns": [list(t) for t in traj.turns]}
        rows.append(row)
    path = tmp_path_factory.mktemp("swe-corpus") / "bugs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_sweep_cli_grouped_with_turn_poolings(corpus: Path, tmp_path: Path) -> None:
    tokenizer = build_char_tokenizer()
    ref = save_tiny(tiny_qwen2(tokenizer, hidden_size=32, num_layers=1, seed=0), tokenizer, tmp_path / "ref")
    out = tmp_path / "sweep"
    result = CliRunner().invoke(probes, [
        "sweep", "--data", str(corpus), "--reference", str(ref), "--band", "1-2", "--k", "3", "--archs", "linear",
        "--poolings", "mean_full", "--turn-poolings", "mean,last,last-half,attention", "--balances", "weighted",
        "--split", "grouped", "--folds", "3", "--max-epochs", "5", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert sorted(r["turn_pooling"] for r in rows) == ["attention", "last", "last_half", "mean"]
    assert all(r["runs"] == 3 and r["balance"] == "weighted" for r in rows)  # one run per repository fold
    meta = json.loads((out / "best_probe" / "probe.json").read_text())
    assert meta["training"]["split"] == "grouped" and meta["training"]["groups"] == 3


def test_swe_defaults_grouped_weighted_and_groups_by_repository() -> None:
    from curriculum.domains.swe.domain import SweDomain
    from curriculum.probing.first_probe import task_groups
    from daemon.config import PropelConfig

    swe = PropelConfig.model_validate({"domain": {"name": "swe"}}).probes
    assert (swe.validation, swe.balance, swe.train_balance) == ("grouped", "weighted", "weighted")
    arith = PropelConfig.model_validate({}).probes
    assert (arith.validation, arith.train_balance) == ("kfold", "downsample")
    tasks = [Task("swe", f"t{i}", {"repo": r}) for i, r in enumerate(("parse", "six", "parse"))]
    assert task_groups(SweDomain.__new__(SweDomain), tasks) == ["parse", "six", "parse"]
    assert task_groups(_Domain(), tasks) is None  # type: ignore[arg-type]  # a domain without groups
