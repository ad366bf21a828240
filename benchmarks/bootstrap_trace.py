"""Validity along the default bootstrap schedule: where does the 1,800-step recipe cross 95 %? (#38)

Trains the default recipe for one seed with the product's ``curriculum.rl.bootstrap.train`` and measures
validity on the recipe's own evaluation sample (``measure_validity``, ``eval_samples`` at seed + 1) every
``--every`` steps from ``--start``, through ``train``'s ``on_step`` hook. Sampling runs under a forked RNG,
so the training trajectory is the one an unmeasured bootstrap takes.
Usage: ``python -m benchmarks.bootstrap_trace --seed 1 [--threads 1] [--start 750] [--every 150]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

import torch

from benchmarks._common import write_result
from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from curriculum.rl.bootstrap import BootstrapSettings, domain_corpus, measure_validity, train


def trace(seed: int, start: int, every: int) -> list[dict[str, float]]:
    """(step, validity, seconds) every ``every`` steps from ``start`` along the default recipe, trained by
    the product's :func:`~curriculum.rl.bootstrap.train`."""
    s = replace(BootstrapSettings(), seed=seed)
    tok, corpus = build_char_tokenizer(), domain_corpus("arith", None)
    model = tiny_qwen2(tok, hidden_size=s.hidden_size, num_layers=s.num_layers, num_heads=s.num_heads, seed=s.seed)
    out: list[dict[str, float]] = []
    began = time.perf_counter()

    def measure(step: int) -> None:
        if step >= start and step % every == 0:
            validity = measure_validity(model, tok, s.eval_samples, s.seed + 1, s.max_new_tokens, corpus)
            model.train()
            out.append({"step": step, "validity": round(validity, 4), "s": round(time.perf_counter() - began, 1)})
            print(out[-1], flush=True)

    train(model, tok, s, show_progress=False, corpus=corpus, on_step=measure)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: two seeds side by side)")
    parser.add_argument("--start", type=int, default=750)
    parser.add_argument("--every", type=int, default=150)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {"seed": args.seed, "threads": args.threads, "recipe": vars(BootstrapSettings()),
              "trace": trace(args.seed, args.start, args.every)}
    write_result(f"bootstrap_trace_seed{args.seed}", result)
    return result


if __name__ == "__main__":
    main()
