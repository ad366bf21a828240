"""Bootstrap training speed by torch intra-op thread count, side by side in one run.

Drives the product's own training step (``curriculum.rl.bootstrap.train`` on the recipe's model) for a
few steps per arm, alternating arms so both see the same machine load, and records seconds per
step. The load average is recorded too: on a shared 2-core machine the gap is largest.
Usage: ``python benchmarks/bootstrap_threads.py [STEPS_PER_ROUND] [ROUNDS]``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from benchmarks._common import write_result
from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from curriculum.rl.bootstrap import BootstrapSettings, torch_threads, train


def main(steps: int = 10, rounds: int = 3) -> dict[str, object]:
    settings = replace(BootstrapSettings(), steps=steps, warmup_steps=1)
    tokenizer = build_char_tokenizer()
    arms = {1: [], 2: []}  # type: dict[int, list[float]]
    for _ in range(rounds):
        for threads in arms:
            model = tiny_qwen2(tokenizer, hidden_size=settings.hidden_size, num_layers=settings.num_layers,
                               num_heads=settings.num_heads, seed=settings.seed)
            with torch_threads(threads):
                start = time.perf_counter()
                train(model, tokenizer, settings, show_progress=False)
                arms[threads].append((time.perf_counter() - start) / steps)
    result = {"steps_per_round": steps, "rounds": rounds, "load_average": os.getloadavg(),
              "seconds_per_step": {str(k): v for k, v in arms.items()},
              "median_s_per_step": {str(k): sorted(v)[len(v) // 2] for k, v in arms.items()},
              "recipe_steps": BootstrapSettings().steps}
    med = result["median_s_per_step"]
    assert isinstance(med, dict)
    result["speedup_1_vs_2_threads"] = med["2"] / med["1"]
    write_result("bootstrap_threads", result)
    _plot(arms)
    return result


def _plot(arms: dict[int, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS

    fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    ax.boxplot([arms[1], arms[2]], tick_labels=["1 thread", "2 threads"])
    ax.set_ylabel("seconds per bootstrap step")
    ax.set_title("bootstrap step time by torch threads (same run, alternating)", fontsize=9)
    fig.savefig(RESULTS / "bootstrap_threads.png", dpi=120)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(main(*args))
