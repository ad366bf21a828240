"""`propel run --cycles 3` on the embedded defaults (SQLite, in-process spot-checks, synthetic solver)
from a fresh data directory: it completes, emits tasks, and a restart continues the same run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.store.db import Store
from curriculum.store.models import GeneratorCheckpoint, Label, MetricPoint, ProbeRow, QueueItem, TaskRow
from daemon.config import load_config
from daemon.service.settings import followed_solver_name
from propel_sdk.schema import FrontierTask
from tests.e2e.conftest import run_state, start_daemon, write_config

pytestmark = [pytest.mark.slow]


def test_embedded_three_cycles_then_resume(tmp_path: Path, tiny_generator: Path) -> None:
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    cfg = write_config(tmp_path / "c.toml", tiny_generator, tmp_path / "data", db, "emb",
                       daemon_keys="emit_rollouts = true")
    log = tmp_path / "daemon.log"
    proc = start_daemon(cfg, log, "--cycles", "3", "--no-api")
    assert proc.wait(timeout=900) == 0, log.read_text()[-4000:]
    out = log.read_text()
    assert "cycle 0" in out and "cycle 2" in out and "Traceback" not in out
    store = Store(db)
    try:
        assert run_state(store, "emb")[:2] == ("rl", 3)
        with store.session() as s:
            messages = [q.message for q in s.scalars(select(QueueItem))]
            steps = s.scalars(select(GeneratorCheckpoint.step).order_by(GeneratorCheckpoint.step)).all()
            primaries = s.scalars(select(ProbeRow.name).where(ProbeRow.role == "primary")).all()
            learned = {r.meta["training"]["solver"]
                       for r in s.scalars(select(ProbeRow).where(ProbeRow.role == "primary"))}
            labelled = set(s.scalars(select(Label.solver_name).distinct()))  # the name a refresh is judged for
            cycles = s.execute(select(func.count(func.distinct(MetricPoint.cycle)))).scalar_one()
            rollouts = s.scalars(select(MetricPoint.value).where(MetricPoint.name == "rollouts")).all()
            rollout_tasks = [t for t in s.scalars(select(TaskRow)) if t.payload.get("generator") == "rl_rollout"]
        assert messages, "no task was emitted"
        # daemon.emit_rollouts (on here): each chunk's GRPO rollouts, taken from TRL's reward calls
        assert len(rollouts) == 3 and min(rollouts) > 0 and 0 < len(rollout_tasks) <= sum(rollouts)
        for m in messages:
            FrontierTask.model_validate(m)
        # the newest rl.keep_checkpoints rows, and the last healthy one if it is older (the rollback target
        # is pinned: whether cycle 1's sample passed the health rule depends on how many tasks it drew)
        assert steps[-2:] == [4, 6] and steps[:-2] in ([], [2]), steps
        assert len(primaries) == 1 and cycles == 3
        # whose labels the first probe learned: a refresh for another solver (a followed trainer) replaces it
        assert learned == labelled == {followed_solver_name(load_config(cfg))}
        # restart on "another machine": no local checkpoint, the newest row's artifact drives resume
        shutil.rmtree(tmp_path / "data" / "runs" / "emb" / "generator")
        proc = start_daemon(cfg, log, "--cycles", "1", "--no-api")  # restart: continues, does not redo
        assert proc.wait(timeout=600) == 0, log.read_text()[-4000:]
        assert run_state(store, "emb")[:2] == ("rl", 4)
        with store.session() as s:
            assert s.scalars(select(func.max(GeneratorCheckpoint.step))).one() == 8
            assert len(s.scalars(select(ProbeRow.name).where(ProbeRow.role == "primary")).all()) == 1
        assert "restored RL checkpoint step 6 from the artifact store" in log.read_text()
    finally:
        store.dispose()
