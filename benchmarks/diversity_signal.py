"""How much GRPO signal the diversity penalty carries, on real generated arith samples (issue #22).

The toy table's diversity row at ``rl.diversity_weight = 1.0`` barely moved Self-BLEU-3. This benchmark asks
why, cheaply, before any long run: on ``n`` samples of the bootstrapped generator (``base``) and of the same
generator after ``steps`` GRPO steps of plain PROPEL (``propel``; the daemon's engine on the toy table's
probe), with the samples laid out as the reward sees them (calls of ``rl.batch_size``, GRPO groups of
``rl.num_generations``), it records per measure (``jaccard``: the original penalty; ``self_bleu``: per-text
Self-BLEU against the call, the archive and a rollout window):

* the penalty's mean and its mean **within-group standard deviation** — what survives GRPO's per-group
  advantage normalisation — next to the within-group std of the hard-gate reward itself (the probe
  logit): ``weight × penalty std / reward std`` is the share of the advantage the term can move;
* the Spearman correlation of the per-text penalty with the per-text Self-BLEU-3 score of the sample
  (:func:`curriculum.reward.diversity.self_bleu_scores`, the metric the goal is stated in).

Everything runs on the product's code (engine, reward, term); the solver is not called.

    .venv/bin/python -m benchmarks.diversity_signal [--n 512] [--steps 60]
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from benchmarks._common import COMMIT_AT_START, write_result
from benchmarks.toy_propel import Settings, build_shared, never_stop, open_row, row_config
from curriculum.domains.arith import ArithDomain
from curriculum.reward.diversity import self_bleu_scores
from curriculum.reward.novelty import MEASURES, DiversityTerm

log = logging.getLogger("benchmarks.diversity_signal")


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if a.size > 2 and ra.std() and rb.std() else float("nan")


def measure(engine: Any, texts: list[str], batch: int, group: int) -> dict[str, Any]:
    """Reward and penalty statistics of ``texts`` split into reward calls of ``batch`` (groups of ``group``)."""
    domain = ArithDomain()
    checks = domain.validate_batch(texts)
    engine.reward.diversity = None
    valid = [i for i, v in enumerate(checks) if v.valid]
    rewards = np.asarray(engine.rewards(checks, engine.score([domain.reference_text(checks[i].task)
                                                                for i in valid])))
    metric = np.full(len(texts), np.nan)
    metric[valid] = self_bleu_scores([checks[i].task.text for i in valid], 3)
    out: dict[str, Any] = {"n": len(texts), "validity": len(valid) / len(texts)}
    groups = [np.arange(s, s + group) for s in range(0, len(texts) - group + 1, group)]

    def within_std(values: np.ndarray) -> float:
        stds = [np.std(values[g][np.isin(g, valid)]) for g in groups if np.isin(g, valid).sum() > 1]
        return float(np.mean(stds)) if stds else float("nan")

    out["reward_within_group_std"] = within_std(rewards)
    for name in MEASURES:
        term = DiversityTerm("arith", 1.0, measure=name)
        pen = np.concatenate([term.penalties([v.task.text if v.valid else None for v in checks[s:s + batch]], group)
                              for s in range(0, len(checks), batch)])
        ok = np.asarray(valid)
        out[name] = {"mean": float(pen[ok].mean()), "std": float(pen[ok].std()),
                     "share_zero": float(np.mean(pen[ok] == 0)),
                     "within_group_std": within_std(pen),
                     "ratio_to_reward_std": within_std(pen) / out["reward_within_group_std"],
                     "spearman_vs_self_bleu3": _spearman(pen[ok], metric[ok])}
    out["self_bleu3_per_text_mean"] = float(np.nanmean(metric))
    out["examples"] = texts[:16]
    return out


@click.command()
@click.option("--n", type=int, default=512, show_default=True, help="samples per policy")
@click.option("--steps", type=int, default=60, show_default=True, help="GRPO steps of the trained policy")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="diversity_signal", show_default=True)
def main(n: int, steps: int, data_dir: Path, name: str) -> None:
    """Measure the penalty's within-group signal against the probe reward's, before and after PROPEL RL."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    settings = Settings()
    shared = build_shared(settings, data_dir)
    data: dict[str, Any] = {"commit": COMMIT_AT_START, "n": n, "steps": steps, "batch": settings.batch,
                            "group": settings.group}
    with tempfile.TemporaryDirectory(prefix="diversity_signal_") as tmp:
        cfg = row_config(shared, settings, Path(tmp), "signal-0", 0, steps)
        store, _, engine = open_row(cfg, shared, ["mlp"])
        try:
            data["base"] = measure(engine, engine.sample(n, 100), settings.batch, settings.group)
            log.info("base: %s", {k: v for k, v in data["base"].items() if k != "examples"})
            engine.rl_chunk(steps, never_stop, 1.0)
            data["propel"] = measure(engine, engine.sample(n, 100), settings.batch, settings.group)
            log.info("propel: %s", {k: v for k, v in data["propel"].items() if k != "examples"})
        finally:
            store.dispose()
    write_result(name, data)


if __name__ == "__main__":
    main()
