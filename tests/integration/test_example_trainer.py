"""The example trainer (examples/trl_trainer.py): its reward/report path, and a few GRPO steps on tasks
leased from a real API server: each task's group is acked once as the trainer's solver at the version
it announced, checkpoints are saved and announced, the rest of the leased tasks are nacked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, SolverVersionRow
from daemon.http.api import ApiContext, create_app
from examples.trl_trainer import Reporter, TrainerConfig, parse_args, train
from propel_sdk.client import PropelClient
from propel_sdk.torch_data import TaskStream
from testkit.seeding import seed_arith
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
EXPRS = [f"{a}+{b}" for a in range(1, 7) for b in range(1, 6)]


@pytest.fixture
def api(sqlite_store: Store) -> Iterator[tuple[str, Store]]:
    with serve_app(create_app(ApiContext(store=sqlite_store, run_name="trainer"))) as url:
        yield url, sqlite_store


def test_reward_grades_completions_and_reports_each_group_once(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed_arith(store, ["2+3", "4*5"], run="trainer")
    with PropelClient(url) as client, TaskStream(client, solver="tiny", version="step-0", batch=2,
                                                 ack_every=1) as stream:
        rows = [row for _, row in zip(range(2), stream, strict=False)]
        reward = Reporter(stream)
        task_id = [rows[0]["task_id"]] * 3 + [rows[1]["task_id"]] * 3
        got = reward([r["prompt"] for r in rows for _ in range(3)], ["5", "6", "5", "20", "20", "20"], task_id)
        assert got == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
        assert (reward.groups, reward.groups_with_signal, stream.acked) == (2, 1, 2)
    with store.session() as s:
        labels = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k).order_by(Label.task_id)).all()
    assert [tuple(lab) for lab in labels] == [(ids[0], "tiny@step-0", 2, 3), (ids[1], "tiny@step-0", 3, 3)]


def test_cli_help_and_argument_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse_args(["--help"])
    assert done.value.code == 0 and "--announce-every" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        parse_args(["--steps", "0"])
    assert done.value.code == 2 and "must be ≥ 1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_few_grpo_steps_on_leased_tasks(api: tuple[str, Store], tmp_path: Path) -> None:
    url, store = api
    ids = seed_arith(store, EXPRS, run="trainer")
    cfg = TrainerConfig(api=url, solver_name="tiny", steps=4, announce_every=2, checkpoint_dir=tmp_path / "ckpt",
                        pretrain_steps=5, pretrain_cache=tmp_path / "pre", held_out=8, prompts_per_step=2,
                        num_generations=4, log_every=1, metrics_out=tmp_path / "m.jsonl")
    out = train(cfg, say=lambda _: None)
    assert out["steps"] == 4 and out["groups"] == 8 and out["acked"] == 8
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-0", "step-2", "step-4"]
    assert (tmp_path / "ckpt" / "step-4" / "model.safetensors").exists()
    with store.session() as s:
        labels = s.execute(select(Label.solver_id, Label.k)).all()
        versions = s.scalars(select(SolverVersionRow.version).where(SolverVersionRow.solver == "tiny")).all()
        states = s.scalars(select(QueueItem.state).where(QueueItem.task_id.in_(ids))).all()
    assert len(labels) == 8 and {k for _, k in labels} == {4}
    assert {sid for sid, _ in labels} <= {"tiny@step-0", "tiny@step-2"}
    assert set(versions) == {"step-0", "step-2", "step-4"}
    assert states.count("acked") == 8 and set(states) == {"acked", "ready"}  # read-ahead rows were nacked
    events = [json.loads(line)["event"] for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert events.count("announce") == 3 and events.count("progress") == 4 and events[-1] == "done"
    with PropelClient(url) as client:
        assert client.solver_versions("tiny")["current"] == "step-4"
