"""Stage 4 — run one chunk of GRPO steps and commit its checkpoint.

Each chunk builds a **new** ``GRPOTrainer`` with the reward of the moment (so the daemon can
hot-swap the probe ensemble between chunks) and ``resume_from_checkpoint`` set to the store's
latest checkpoint: adapter weights, optimizer, scheduler, RNG state and global step carry over.
The trainer writes into a staging directory; the store commits it atomically.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from curriculum.rl.checkpoints import CheckpointStore
from curriculum.rl.config import GeneratorRLConfig, grpo_arguments
from curriculum.rl.model import adapter_hash

RewardFn = Callable[..., Sequence[float | None]]


@dataclass(frozen=True)
class ChunkStats:
    """What one chunk did. ``kl`` is ``None`` when ``beta == 0`` (TRL does not compute it)."""

    start_step: int
    end_step: int
    reward_mean: float
    reward_std: float
    zero_spread_share: float
    validity_rate: float
    kl: float | None
    wall_s: float
    adapter_hash: str
    checkpoint: str
    reward_name: str
    solver_trials: int = 0
    diversity_penalty: float | None = None  # mean over the chunk's reward calls; None when the term is off
    topic_share_penalty: float | None = None  # mean over the chunk's reward calls; None when the term is off

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompt_dataset(prompts: Sequence[str]) -> Any:
    """A ``datasets.Dataset`` with a ``prompt`` column (TRL's expected format)."""
    from datasets import Dataset

    if not prompts:
        raise ValueError("the prompt pool is empty")
    return Dataset.from_dict({"prompt": list(prompts)})


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _history_stats(history: list[dict[str, Any]], start_step: int) -> tuple[dict[str, float], float | None]:
    rows = [h for h in history if "reward" in h and int(h.get("step", 0)) > start_step]
    kls = [float(h["kl"]) for h in rows if "kl" in h]
    means = {
        "reward_mean": _mean([float(h["reward"]) for h in rows]),
        "reward_std": _mean([float(h["reward_std"]) for h in rows if "reward_std" in h]),
        "zero_spread_share": _mean([float(h["frac_reward_zero_std"]) for h in rows if "frac_reward_zero_std" in h]),
    }
    return means, (_mean(kls) if kls else None)


def _log_mean(logs: list[Any], key: str) -> float | None:
    """Mean of a penalty over the reward calls that logged it; ``None`` when its term is off."""
    values = [float(p) for log in logs if (p := getattr(log, key, None)) is not None]
    return _mean(values) if values else None


def _reward_log_stats(reward: RewardFn, first_log: int) -> tuple[float, int, float | None, float | None]:
    logs = list(getattr(reward, "logs", []))[first_log:]
    validity = _mean([float(log.validity_rate) for log in logs])
    trials = sum(int(getattr(log, "solver_trials", 0)) for log in logs)
    return validity, trials, _log_mean(logs, "diversity_penalty"), _log_mean(logs, "topic_share_penalty")


def anchor_kl_to_base(model: Any) -> None:
    """Make the KL anchor the base generator, in every chunk.

    Handed a ``PeftModel`` with ``beta > 0``, TRL copies the current adapter into a frozen "ref"
    adapter, which would move the anchor to wherever each chunk started. Without "ref", TRL
    computes reference log-probs with adapters disabled, i.e. from the base model (PROPEL's anchor).
    """
    if "ref" in getattr(model, "peft_config", {}):
        model.delete_adapter("ref")
        model.set_adapter("default")


def _quiet(trainer: Any) -> None:
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def run_chunk(model: Any, tokenizer: Any, reward: RewardFn, config: GeneratorRLConfig, store: CheckpointStore,
              n_steps: int, prompts: Sequence[str], provenance: dict[str, Any] | None = None) -> ChunkStats:
    """Train ``n_steps`` more GRPO steps on ``model`` (a PEFT model) with ``reward``; commit; report."""
    from trl import GRPOTrainer

    if n_steps < 1:
        raise ValueError(f"n_steps must be ≥ 1, got {n_steps}")
    resume = store.latest()
    start_step = store.global_step()
    staging = store.new_staging_dir()
    args = grpo_arguments(config, str(staging), max_steps=start_step + n_steps)
    first_log = len(getattr(reward, "logs", []))
    started = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=[cast(Any, reward)], args=args,
                          train_dataset=prompt_dataset(prompts), processing_class=tokenizer)
    anchor_kl_to_base(model)
    _quiet(trainer)
    trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    wall_s = time.perf_counter() - started
    end_step = int(trainer.state.global_step)
    staged = staging / f"checkpoint-{end_step}"
    hist, kl = _history_stats(trainer.state.log_history, start_step)
    validity, trials, penalty, topic_penalty = _reward_log_stats(reward, first_log)
    name = str(getattr(reward, "__name__", type(reward).__name__))
    stats = ChunkStats(
        start_step=start_step, end_step=end_step, reward_mean=hist["reward_mean"], reward_std=hist["reward_std"],
        zero_spread_share=hist["zero_spread_share"], validity_rate=validity, kl=kl, wall_s=wall_s,
        adapter_hash=adapter_hash(model), checkpoint="", reward_name=name,
        solver_trials=trials, diversity_penalty=penalty, topic_share_penalty=topic_penalty,
    )
    meta = {"stats": stats.to_dict(), "config_hash": config.config_hash(), **(provenance or {})}
    committed = store.commit(staged, meta)
    return ChunkStats(**{**stats.to_dict(), "checkpoint": str(committed)})
