"""Self-BLEU-3: our vectorised implementation vs nltk's ``sentence_bleu`` (leave-one-out), one run.

Texts are arith tasks from the domain's random generator (1–6 operators). Ours runs on the whole
sample at every size; nltk (method1 smoothing, uniform weights) runs on sizes up to
``--nltk-max`` only, because leave-one-out ``sentence_bleu`` is O(N²) in pure Python. The nltk time
at 2,000 texts is *extrapolated* from the largest measured size by N·(N−1) and labelled so. Values
of both are compared on every size nltk ran. Self-BLEU grows with the sample size — the second
panel of the plot — which is why alerts use a fixed sample size.

    python benchmarks/self_bleu.py [--n-texts 2000] [--nltk-max 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, write_result
from curriculum.domains.arith import random_expression
from curriculum.reward.diversity import self_bleu, tokenize


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(1, 6)) for _ in range(n)]


def nltk_self_bleu(texts: list[str]) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    toks = [tokenize(t) for t in texts]
    smooth = SmoothingFunction().method1
    scores = [sentence_bleu(toks[:i] + toks[i + 1:], h, weights=(1 / 3, 1 / 3, 1 / 3), smoothing_function=smooth)
              for i, h in enumerate(toks)]
    return float(sum(scores) / len(scores))


def best_time(fn: Any, repeats: int) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def run(n_texts: int, nltk_max: int, repeats: int) -> dict[str, Any]:
    texts = corpus(n_texts)
    nltk_self_bleu(texts[:3])  # import nltk and warm up outside the timings
    sizes = sorted({s for s in (50, 100, 200, 300, 500, 1000, n_texts) if s <= n_texts})
    rows = []
    for size in sizes:
        sample = texts[:size]
        ours_s, ours_v = best_time(lambda s=sample: self_bleu(s, 3), repeats)
        row: dict[str, Any] = {"n": size, "ours_s": ours_s, "ours_self_bleu3": ours_v}
        if size <= nltk_max:
            nltk_s, nltk_v = best_time(lambda s=sample: nltk_self_bleu(s), 1)
            row |= {"nltk_s": nltk_s, "nltk_self_bleu3": nltk_v, "abs_diff": abs(nltk_v - ours_v)}
        rows.append(row)
        print(row, flush=True)
    measured = [r for r in rows if "nltk_s" in r]
    ref = measured[-1]
    scale = (n_texts * (n_texts - 1)) / (ref["n"] * (ref["n"] - 1))
    full = rows[-1]
    return {
        "corpus": "arith random_expression, 1-6 operators, seed 0",
        "metric": "Self-BLEU-3, leave-one-out, uniform weights, nltk method1 smoothing",
        "n_texts": n_texts, "repeats_ours": repeats, "rows": rows,
        "ours_seconds_at_n": full["ours_s"],
        "nltk_seconds_at_n_extrapolated": ref["nltk_s"] * scale,
        "nltk_extrapolated_from_n": ref["n"],
        "speedup_extrapolated": ref["nltk_s"] * scale / full["ours_s"],
        "max_abs_diff_vs_nltk": max(r["abs_diff"] for r in measured),
        "note": f"nltk at n={n_texts} is EXTRAPOLATED from its measured time at n={ref['n']} by N(N-1) scaling",
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax.plot([r["n"] for r in rows], [r["ours_s"] for r in rows], "o-", label="ours (numpy, measured)")
    nl = [r for r in rows if "nltk_s" in r]
    ax.plot([r["n"] for r in nl], [r["nltk_s"] for r in nl], "s-", color="tab:red", label="nltk (measured)")
    ax.plot([nl[-1]["n"], result["n_texts"]], [nl[-1]["nltk_s"], result["nltk_seconds_at_n_extrapolated"]],
            "s--", color="tab:red", alpha=0.5, label="nltk (extrapolated, N(N−1))")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("texts in sample")
    ax.set_ylabel("seconds (best of repeats)")
    ax.set_title(f"Self-BLEU-3 time at n={result['n_texts']}: ours {result['ours_seconds_at_n']:.3f} s, "
                 f"nltk ≈{result['nltk_seconds_at_n_extrapolated']:.0f} s (extrapolated)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax2.plot([r["n"] for r in rows], [r["ours_self_bleu3"] for r in rows], "o-")
    ax2.set_xscale("log")
    ax2.set_xlabel("texts in sample")
    ax2.set_ylabel("Self-BLEU-3")
    ax2.set_title("Self-BLEU-3 grows with sample size (same distribution)", fontsize=9)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-texts", type=int, default=2000)
    ap.add_argument("--nltk-max", type=int, default=500, help="largest sample nltk runs on (O(N²))")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    result = run(args.n_texts, args.nltk_max, args.repeats)
    path = write_result("self_bleu", result)
    plot(result, RESULTS / "self_bleu.png")
    print(f"wrote {path} and {RESULTS / 'self_bleu.png'}")


if __name__ == "__main__":
    main()
