"""Validity along the default bootstrap schedule: where does the 1,800-step recipe cross 95 %? (#38)

Trains the product's recipe (``curriculum.rl.bootstrap``: same model, corpus, batches, AdamW and cosine
schedule, same RNG streams) for one seed and measures validity on the recipe's own evaluation sample
(``measure_validity``, ``eval_samples`` at seed + 1) every ``--every`` steps from ``--start``. Sampling runs
under a forked RNG, so the training trajectory is the one an unmeasured bootstrap takes.
Usage: ``python -m benchmarks.bootstrap_trace --seed 1 [--threads 1] [--start 750] [--every 150]``.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace
from typing import Any

import torch

from benchmarks._common import write_result
from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from curriculum.rl.bootstrap import BootstrapSettings, _encode_batch, _lr_factor, domain_corpus, measure_validity


def trace(seed: int, start: int, every: int) -> list[dict[str, float]]:
    """(step, validity, seconds) every ``every`` steps from ``start`` along the default recipe."""
    s = replace(BootstrapSettings(), seed=seed)
    tok, corpus = build_char_tokenizer(), domain_corpus("arith", None)
    model = tiny_qwen2(tok, hidden_size=s.hidden_size, num_layers=s.num_layers, num_heads=s.num_heads, seed=s.seed)
    rng = random.Random(s.seed)
    torch.manual_seed(s.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda k: _lr_factor(k, s))
    model.train()
    out: list[dict[str, float]] = []
    began = time.perf_counter()
    for step in range(1, s.steps + 1):
        loss = model(**_encode_batch(tok, corpus.draw(rng, s.batch_size), corpus.prompt)).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        if step >= start and step % every == 0:
            validity = measure_validity(model, tok, s.eval_samples, s.seed + 1, s.max_new_tokens, corpus)
            model.train()
            out.append({"step": step, "validity": round(validity, 4), "s": round(time.perf_counter() - began, 1)})
            print(out[-1], flush=True)
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
