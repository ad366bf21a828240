"""The closed loop with the tiny-LM solver: the example GRPO trainer (``examples/trl_trainer.py``) leases
from the arm's API, acks, announces ``step-N`` every round and saves ``checkpoint-dir/step-N``.

The round records come from the trainer's metrics (held-out accuracy at each announce, the share of
GRPO groups with non-zero reward variance per round) and from the arm's store, read after the run:
the tasks a round served are those the trainer acked as the round's version (distinct tasks: a replay's ack
of the same version overwrites its label, so a task served again counts once; the daemon's frontier
replays are counted apart, ``replayed``), the daemon's spent trials are counted up to each announce.
In-band is then measured like the synthetic row's: k attempts per sampled served task by the round's
checkpoint (loaded with the ``hf`` backend, on the GPU with ``--device cuda``), outside every budget. Trainer
seconds run from announce to announce (held-out scoring included); the trainer's wait on the queue is not
split out here (the TRL stream does not time it).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from curriculum.common.solver_api import SolverBackend
from curriculum.solvers import build_solver
from curriculum.store.db import Store
from curriculum.store.models import Label, MetricPoint, SolverTrial, TaskRow
from testkit.closed_loop import DAEMON_ARMS, SOLVER_NAME, ArmResult, ArmServer, LoopSettings, RoundRecord, serve_arm


@dataclass(frozen=True)
class LMSettings:
    pretrain_steps: int = 2500
    prompts_per_step: int = 4
    held_out: int = 200
    held_out_kind: str = "sums"  # examples.arith_solver.HELD_OUT_KINDS
    learning_rate: float = 1e-4
    device: str = "cpu"  # the trainer's device: cpu or cuda (``--device``)


class LMLearner:
    """The tiny LM's checkpoints as solvers (the trainer itself runs in :func:`run_lm_arm`)."""

    synthetic = False

    def __init__(self, arm: str, ckpt: Path, frozen: Path, device: str = "cpu") -> None:
        self.arm, self.ckpt, self.frozen, self.version = arm, ckpt, frozen, "step-0"
        # the in-band measurement (k attempts per served task): batched wide on a GPU, as on the CPU before
        self.options: dict[str, Any] = {"device": "cuda", "batch_size": 512} if device == "cuda" else {}
        self._cache: dict[str, SolverBackend] = {}

    def solver_at(self, version: str) -> SolverBackend:
        if version not in self._cache:
            self._cache[version] = build_solver("hf", model=str(self.ckpt / (version or "step-0")),
                                                options=self.options)
        return self._cache[version]

    def train_step(self, tasks: Any) -> list[int]:  # the example trainer trains; this learner only answers
        raise NotImplementedError("the LM row trains with examples.trl_trainer.train")

    def checkpoint(self, version: str) -> None:
        self.version = version

    def solver_toml(self) -> str:
        """The continuous daemon's hf solver serves the announced version's folder; the static one the start."""
        common = 'backend = "hf"\nmax_tokens = 8\ntemperature = 1.0\ntimeout_s = 900\n'
        if self.arm == "continuous":
            return f'{common}model = "{self.ckpt}/{{version}}"\nversion = "step-0"\n'
        return f'{common}model = "{self.frozen}"\n'


def run_lm_arm(arm: str, seed: int, settings: LoopSettings, lm: LMSettings, generator: Path, workdir: Path,
               cache: Path, say: Any = print) -> tuple[ArmResult, LMLearner]:
    """Pretrained solver (cached per seed) → the arm's server → ``train()`` for R × S steps → records."""
    import torch

    from examples import arith_solver
    from examples.trl_trainer import TrainerConfig, train

    torch.set_num_threads(1)  # the daemon shares the CPU (2 threads are ~10x slower under load, README)
    base = arith_solver.pretrained(arith_solver.PretrainSettings(steps=lm.pretrain_steps, seed=seed), cache, say)
    ckpt, frozen = workdir / "ckpt", workdir / "frozen-step-0"
    shutil.copytree(base, ckpt / "step-0", dirs_exist_ok=True)
    shutil.copytree(base, frozen, dirs_exist_ok=True)
    learner = LMLearner(arm, ckpt, frozen, lm.device)
    cfg = TrainerConfig(solver_name=SOLVER_NAME, steps=settings.rounds * settings.steps_per_round,
                        announce_every=settings.steps_per_round, checkpoint_dir=ckpt,
                        pretrain_steps=lm.pretrain_steps, pretrain_cache=cache, seed=seed, held_out=lm.held_out,
                        held_out_kind=lm.held_out_kind,
                        prompts_per_step=lm.prompts_per_step, learning_rate=lm.learning_rate,
                        log_every=settings.steps_per_round, metrics_out=workdir / "trainer.jsonl",
                        extra_grpo={"use_cpu": lm.device == "cpu"})
    with serve_arm(arm, workdir, generator, settings, seed, learner.solver_toml()) as server:
        cfg.api = server.url
        summary = train(cfg, say=lambda line: say(f"[lm {arm} seed {seed}] {line}"))
        result = _records(arm, seed, settings, summary["records"], server)
    return result, learner


def _metric_sum(s: Any, name: str, at: datetime) -> float:
    """The daemon's metric ``name`` summed over its cycles up to ``at``."""
    return float(s.scalar(select(func.coalesce(func.sum(MetricPoint.value), 0.0))
                          .where(MetricPoint.name == name, MetricPoint.at <= at)) or 0.0)


def _records(arm: str, seed: int, settings: LoopSettings, records: list[dict[str, Any]],
             server: ArmServer) -> ArmResult:
    announces = {int(r["step"]): r for r in records if r["event"] == "announce"}
    signal = {int(r["step"]): r.get("signal_share") for r in records if r["event"] == "progress"}
    result = ArmResult(arm, seed, float(announces[0]["held_out_accuracy"] or 0.0))
    store, rollouts = Store(server.db_url), 0
    try:
        for r in range(settings.rounds):
            start, end = r * settings.steps_per_round, (r + 1) * settings.steps_per_round
            version = f"step-{start}"
            with store.session() as s:
                served = [dict(p) for p in s.scalars(select(TaskRow.payload).join(Label, Label.task_id == TaskRow.id)
                                                     .where(Label.source == "consumer",
                                                            Label.solver_name == SOLVER_NAME,
                                                            Label.solver_version == version))]
                at = datetime.fromtimestamp(float(announces[end]["time"]), UTC)
                trials = int(s.execute(select(func.count()).select_from(SolverTrial)
                                       .where(SolverTrial.created_at <= at)).scalar_one()) \
                    if arm in DAEMON_ARMS else 0
                replayed, rollbacks = (int(_metric_sum(s, name, at)) for name in ("replayed", "rolled_back"))
                began = datetime.fromtimestamp(float(announces[start]["time"]), UTC)
                novel = s.scalar(select(func.avg(MetricPoint.value)).where(
                    MetricPoint.name == "novel_share", MetricPoint.at > began, MetricPoint.at <= at))
            groups = len(served)
            share = signal.get(end)
            useful = round(share * groups) if share is not None and math.isfinite(share) else 0
            rollouts += groups * settings.group
            wall = float(announces[end]["time"]) - float(announces[0]["time"])  # held-out scoring included
            result.rounds.append(RoundRecord(r, version, end, served, groups, useful, trials, 0, wall,
                                             announces[end]["held_out_accuracy"], rollouts=rollouts,
                                             train_s=round(wall, 3), replayed=replayed, rollbacks=rollbacks,
                                             novel_share=None if novel is None else round(float(novel), 4)))
    finally:
        store.dispose()
    return result
