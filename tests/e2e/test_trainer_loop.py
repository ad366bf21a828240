"""End to end, the closed loop on a CPU: an embedded daemon whose spot-check solver is the ``hf`` backend
on the example trainer's checkpoint folder (``model = ".../{version}"``), and the example trainer
(examples/trl_trainer.py) doing GRPO on tasks it leases from that daemon. The trainer's acks arrive as
labels of its announced versions, and the daemon's spot-checks follow the announced checkpoints."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, SolverTrial, SolverVersionRow
from examples import arith_solver
from examples.trl_trainer import TrainerConfig, train
from testkit.servers import free_port
from tests.e2e.conftest import kill, start_daemon, wait_until, write_config

# long: on a fresh machine the solver's pretraining alone takes 7-8 minutes (cached after that under
# PROPEL_E2E_CACHE); `make test-long` runs it. `make test` covers the same pieces faster: real GRPO steps
# against a real API (tests/integration/test_example_trainer.py), the versioned hf solver
# (tests/unit/test_versioned_hf_solver.py) and the daemon in a closed loop (tests/e2e/test_closed_loop_quick.py).
pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(3600)]
PRETRAIN_STEPS = 3500  # a weaker solver solves none of the daemon's tasks: the first probe needs in-band ones


def _extra(ckpt: Path) -> str:
    return f'''[domain]
options = {{ max_ops = 2 }}
[solver]
backend = "hf"
model = "{ckpt}/{{version}}"
name = "tiny-arith"
version = "step-0"
max_tokens = 8
timeout_s = 60
'''


def _count(store: Store, query) -> int:  # type: ignore[no-untyped-def]
    try:
        with store.session() as s:
            return int(s.execute(query).scalar_one())
    except OperationalError:  # the daemon has not created the schema yet
        return 0


def test_trainer_learns_from_the_daemon_and_the_daemon_follows(tmp_path: Path, tiny_generator: Path) -> None:
    ckpt = tmp_path / "ckpt"
    cache = Path(os.environ.get("PROPEL_E2E_CACHE", tmp_path)) / "trainer-pretrained"  # reused across sessions
    settings = arith_solver.PretrainSettings(steps=PRETRAIN_STEPS)
    base = arith_solver.pretrained(settings, cache, say=lambda _: None)  # step-0 exists before the daemon labels
    arith_solver.save_checkpoint(*arith_solver.load(base), ckpt / "step-0")
    db = f"sqlite:///{tmp_path / 'propel.db'}"
    port = free_port()
    cfg = write_config(tmp_path / "c.toml", tiny_generator, tmp_path / "data", db, "loop", _extra(ckpt), port=port)
    log = tmp_path / "daemon.log"
    store = Store(db)
    proc = start_daemon(cfg, log, "--cycles", "40")
    try:
        wait_until(lambda: _count(store, select(func.count()).select_from(QueueItem)) >= 8, 1200,
                   "8 queued tasks", proc, log)
        out = train(TrainerConfig(api=f"http://127.0.0.1:{port}", solver_name="tiny-arith", steps=4,
                                  announce_every=2, checkpoint_dir=ckpt, pretrain_steps=PRETRAIN_STEPS,
                                  pretrain_cache=cache, held_out=16, prompts_per_step=2, num_generations=8,
                                  log_every=2), say=lambda _: None)
        wait_until(lambda: _count(store, select(func.count()).select_from(SolverTrial).where(
            SolverTrial.solver_id.in_(["tiny-arith@step-2", "tiny-arith@step-4"]))) > 0, 900,
            "a spot-check on an announced checkpoint", proc, log)
    finally:
        kill(proc, signal.SIGTERM)
    with store.session() as s:
        labels = s.execute(select(Label.solver_id, Label.k).where(Label.source == "consumer")).all()
        versions = set(s.scalars(select(SolverVersionRow.version).where(SolverVersionRow.solver == "tiny-arith")))
    store.dispose()
    assert out["steps"] == 4 and out["acked"] == 8
    assert len(labels) == 8 and {k for _, k in labels} == {8}
    assert {sid for sid, _ in labels} <= {"tiny-arith@step-0", "tiny-arith@step-2"}
    assert {"step-0", "step-2", "step-4"} <= versions
    assert "Traceback" not in log.read_text()
