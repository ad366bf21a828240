"""Cost of the reward's diversity term per reward call vs the probe forward pass on the same batch.

One reward call scores one GRPO generation batch. Side by side on the same batches (tiny Qwen2
reference, hidden 128 × 4 layers, CPU, one MLP probe head — the setup of
``benchmarks/probe_throughput.py``), timed round-robin with medians over the rounds:

* ``probe_arith`` / ``probe_azr`` — ``ProbeScorer.score`` of the batch's reference texts (tokenise +
  forward + head), arith expressions (~20 characters) and AZR code-induction tasks (~500);
* ``diversity_arith`` / ``diversity_azr`` — :meth:`curriculum.reward.novelty.DiversityTerm.penalties` of
  the same batch (canonical forms — ``ast`` for AZR, the costliest domain —, hashed 3-grams, group
  term and a full archive of ``--archive`` emitted tasks);
* ``reward_off`` / ``reward_on`` — the whole hard-gate reward call (validate + probe + gate) without
  and with the term: the overhead a training step actually sees.

Batch sizes: ``--batches`` (default 16 = ``rl.batch_size``, and 64). The tiny reference is the
*cheapest* probe pass this project runs; with a real reference model (billions of parameters, GPU)
the probe's share grows and the term's relative cost shrinks, so the ratios here are upper bounds.
Writes ``benchmarks/results/diversity_cost.{json,png}``.

Run: ``.venv/bin/python -m benchmarks.diversity_cost [--repeats 9 --archive 1024 --threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import threadpool_limits

from benchmarks._common import RESULTS, write_result
from benchmarks.probe_throughput import interleaved_medians, make_probe
from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from curriculum.domains.arith import GENERATOR_PROMPT, ArithDomain, random_expression
from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.rewards import HardGateReward
from probes import ExtractionConfig, FeatureSpec, FrozenReference, ProbeScorer

_AZR_BODIES = (
    "def f({a}, {b}):\n    {c} = [{d} for {d} in {a} if {d} > {b}]\n    return sorted({c})[-{k}:]",
    "def f({a}):\n    {c} = 0\n    while {a}:\n        {c} += {a} % {k}\n        {a} //= {k}\n    return {c}",
    "def f({a}, {b}):\n    return {{{d}: {e} * {k} for {d}, {e} in {a}.items() if {d} != {b}}}",
    "def f({a}):\n    {c} = []\n    for {d} in {a}:\n        {c}.append({d}.upper() if {d} in 'aeiou' else {d})\n"
    "    return ''.join({c})",
)
_NAMES = ("xs", "n", "items", "total", "out", "s", "ch", "k", "v", "d", "key", "words", "acc", "i", "j", "val")


def azr_tasks(n: int, seed: int) -> list[str]:
    """Rendered AZR tasks (code, 10 inputs, message) with random identifiers and constants."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c, d, e = rng.sample(_NAMES, 5)
        code = rng.choice(_AZR_BODIES).format(a=a, b=b, c=c, d=d, e=e, k=rng.randint(2, 9))
        inputs = [f"[{', '.join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 6)))}], {rng.randint(0, 9)}"
                  for _ in range(10)]
        parts = [f"```python\n{code}\n```", *(f"```input\n{x}\n```" for x in inputs),
                 f"```message\nA hint number {rng.randint(0, 999)}.\n```"]
        out.append("\n".join(parts))
    return out


def arith_tasks(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(2, 8)) for _ in range(n)]


def _term(domain: str, archive: list[str], archive_size: int) -> DiversityTerm:
    term = DiversityTerm(domain, weight=0.3, archive_size=archive_size, topic_quota=1.0)
    term.observe(archive, ["t"] * len(archive))
    return term


def run(batches: list[int], repeats: int, archive_size: int) -> dict[str, Any]:
    tokenizer = build_char_tokenizer()
    reference = FrozenReference(tiny_qwen2(tokenizer, hidden_size=128, num_layers=4, seed=0), tokenizer,
                                "tiny-qwen2-h128")
    scorer = ProbeScorer(reference, make_probe(reference, FeatureSpec(-1, "mean_full"), 0),
                         ExtractionConfig(batch_size=32, max_length=512))
    domain = ArithDomain()
    arith_term = _term("arith", arith_tasks(archive_size, seed=1), archive_size)
    azr_term = _term("azr", azr_tasks(archive_size, seed=2), archive_size)
    rows: dict[str, Any] = {}
    for size in batches:
        completions, azr = arith_tasks(size, seed=10 + size), azr_tasks(size, seed=20 + size)
        ref_texts = [GENERATOR_PROMPT + t for t in completions]
        off = HardGateReward(domain, scorer, floor=-100.0, group_size=8)
        on = HardGateReward(domain, scorer, floor=-100.0, group_size=8)
        on.diversity = arith_term
        prompts = [GENERATOR_PROMPT] * size
        modes: dict[str, Callable[[], object]] = {
            "probe_arith": partial(scorer.score, ref_texts), "probe_azr": partial(scorer.score, azr),
            "diversity_arith": partial(arith_term.penalties, completions, 8),
            "diversity_azr": partial(azr_term.penalties, azr, 8),
            "reward_off": partial(off, prompts, completions), "reward_on": partial(on, prompts, completions),
        }
        med = {name: statistics.median(times) for name, times in interleaved_medians(modes, repeats).items()}
        rows[str(size)] = {
            "median_ms": {k: v * 1000 for k, v in med.items()},
            "diversity_arith_vs_probe": med["diversity_arith"] / med["probe_arith"],
            "diversity_azr_vs_probe": med["diversity_azr"] / med["probe_azr"],
            "reward_on_vs_off": med["reward_on"] / med["reward_off"],
        }
    reference.verify_unchanged()
    return {"torch": {"version": torch.__version__, "threads": torch.get_num_threads()},
            "setup": {"threads": torch.get_num_threads(), "batches": batches, "repeats": repeats,
                      "archive_size": archive_size, "n": 3,
                      "group_size": 8, "reference": "tiny-qwen2 hidden 128 × 4 layers, char tokenizer, CPU"},
            "batches": rows,
            "goal": "the term costs a small fraction of the probe pass (it must be cheap: issue #22)"}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["batches"]
    modes = ["probe_arith", "diversity_arith", "probe_azr", "diversity_azr", "reward_off", "reward_on"]
    colours = ["#777", "#2a7", "#555", "#27a", "#bbb", "#a72"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        xs = [i + j * width for i in range(len(rows))]
        ys = [rows[b]["median_ms"][mode] for b in rows]
        bars = ax.bar(xs, ys, width, label=mode, color=colours[j])
        for bar, y in zip(bars, ys, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, y, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [f"batch {b}" for b in rows])
    ax.set_ylabel("ms per reward call (median)")
    ax.set_yscale("log")
    worst = max(max(r["diversity_arith_vs_probe"], r["diversity_azr_vs_probe"]) for r in rows.values())
    ax.set_title(f"diversity term vs the probe pass on the same batch (archive {report['setup']['archive_size']}, "
                 f"tiny reference): at most {worst:.2f}×", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--archive", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op and BLAS threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):  # numpy's BLAS too: spinning threads swamp a shared machine
        report = run(args.batches, args.repeats, args.archive)
    write_result("diversity_cost", report)
    plot(report, RESULTS / "diversity_cost.png")
    for size, row in report["batches"].items():
        cells = "  ".join(f"{k} {v:7.2f} ms" for k, v in row["median_ms"].items())
        print(f"batch {size:>3}: {cells}")
    print(json.dumps({b: {k: v for k, v in r.items() if k != "median_ms"} for b, r in report["batches"].items()},
                     indent=2))


if __name__ == "__main__":
    main()
