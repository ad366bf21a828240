"""Probe scoring throughput vs a bare reference forward pass (tiny Qwen2, hidden 128, CPU).

Side by side on the same texts, timed round-robin (one run of each mode per round, so load from
other processes on a shared machine falls on all modes alike), medians over the rounds:

* ``bare_lm_forward``   — ``model(input_ids, attention_mask)`` of the causal LM (logits included) on
  pre-tokenised, length-sorted, padded batches: the cheapest way a reward could touch the model;
  tokenisation is *not* timed here.
* ``bare_base_forward`` — the same through the base model only (no LM head), for reference.
* ``probe_1_head``      — ``ProbeScorer.score(texts)``: tokenisation + one forward pass per batch +
  pooling + one MLP head (no feature cache).
* ``probe_wco_3``       — the same with a 3-member WCO ensemble reading 2 layers × 2 poolings.

Goals: ``probe_1_head`` ≥ 0.9× the throughput of ``bare_lm_forward``; ``probe_wco_3`` ≤ 1.1× the
time of ``probe_1_head``. Writes ``benchmarks/results/probe_throughput.{json,png}``.

Run: ``.venv/bin/python -m benchmarks.probe_throughput [--texts 300 --repeats 9 --threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks._common import RESULTS, write_result
from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from probes import (
    ExtractionConfig,
    FeatureSpec,
    FrozenReference,
    Probe,
    ProbeEnsemble,
    ProbeHead,
    ProbeScorer,
)


def make_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        terms = [str(rng.randint(0, 999)) for _ in range(rng.randint(4, 20))]
        ops = [rng.choice("+-*") for _ in terms[1:]]
        expr = terms[0] + "".join(op + t for op, t in zip(ops, terms[1:], strict=True))
        out.append(f"Compute {expr} =")
    return out


def make_probe(reference: FrozenReference, spec: FeatureSpec, seed: int) -> Probe:
    torch.manual_seed(seed)
    head = ProbeHead("mlp", spec.output_dim(reference.hidden_size), hidden_dim=256).eval()
    return Probe(head, spec, reference.model_id, reference.fingerprint, reference.hidden_size, (1, 3), 8, f"m{seed}")


def padded_batches(reference: FrozenReference, texts: list[str], batch_size: int) -> list[dict[str, torch.Tensor]]:
    tokenizer = reference.tokenizer
    encoded = sorted((tokenizer(t)["input_ids"] for t in texts), key=len)
    batches = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start : start + batch_size]
        width = max(len(ids) for ids in chunk)
        ids = torch.full((len(chunk), width), reference.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(chunk):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def interleaved_medians(modes: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Time every mode once per round, round-robin, so load from other processes hits all modes alike."""
    for fn in modes.values():
        fn()  # warm-up (allocator, kernel selection)
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(repeats):
        for name, fn in modes.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def run(n_texts: int, repeats: int, batch_size: int) -> dict[str, object]:
    tokenizer = build_char_tokenizer()
    reference = FrozenReference(
        tiny_qwen2(tokenizer, hidden_size=128, num_layers=4, seed=0), tokenizer, "tiny-qwen2-h128"
    )
    texts = make_texts(n_texts)
    batches = padded_batches(reference, texts, batch_size)
    model = reference.model
    base: torch.nn.Module = getattr(model, "base_model", model)  # the body without the LM head
    extraction = ExtractionConfig(batch_size=batch_size, max_length=512)
    one = ProbeScorer(reference, make_probe(reference, FeatureSpec(-1, "mean_full"), 0), extraction)
    members = [
        make_probe(reference, FeatureSpec(-1, "mean_full"), 1),
        make_probe(reference, FeatureSpec(2, "last_token"), 2),
        make_probe(reference, FeatureSpec(2, "mean_full"), 3),
    ]
    wco = ProbeScorer(reference, ProbeEnsemble(members, "min"), extraction)

    def bare(module: torch.nn.Module) -> Callable[[], None]:
        def go() -> None:
            with torch.inference_mode():
                for batch in batches:
                    module(**batch, use_cache=False)

        return go

    modes: dict[str, Callable[[], object]] = {
        "bare_lm_forward": bare(model),
        "bare_base_forward": bare(base),
        "probe_1_head": lambda: one.score(texts),
        "probe_wco_3": lambda: wco.score(texts),
    }
    results: dict[str, dict[str, object]] = {}
    for name, times in interleaved_medians(modes, repeats).items():
        med = statistics.median(times)
        results[name] = {"median_s": med, "tasks_per_s": n_texts / med, "times_s": times}
    reference.verify_unchanged()
    return {
        "torch": {"version": torch.__version__, "threads": torch.get_num_threads()},
        "setup": {
            "texts": n_texts,
            "repeats": repeats,
            "batch_size": batch_size,
            "hidden_size": 128,
            "layers": 4,
            "mean_tokens": sum(len(t) for t in texts) / n_texts,
        },
        "modes": results,
        "ratios": {
            "probe_1_head_vs_bare_lm_throughput": _tps(results, "probe_1_head") / _tps(results, "bare_lm_forward"),
            "probe_1_head_vs_bare_base_throughput": _tps(results, "probe_1_head") / _tps(results, "bare_base_forward"),
            "wco_3_vs_1_head_cost": _med(results, "probe_wco_3") / _med(results, "probe_1_head"),
        },
        "goals": {"probe_1_head_vs_bare_lm_throughput": ">= 0.9", "wco_3_vs_1_head_cost": "<= 1.1"},
    }


def _tps(results: dict[str, dict[str, object]], name: str) -> float:
    return float(results[name]["tasks_per_s"])  # type: ignore[arg-type]


def _med(results: dict[str, dict[str, object]], name: str) -> float:
    return float(results[name]["median_s"])  # type: ignore[arg-type]


def plot(report: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = report["modes"]
    assert isinstance(modes, dict)
    names = list(modes)
    values = [modes[n]["tasks_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bars = ax.bar(names, values, color=["#777", "#aaa", "#2a7", "#27a"])
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.0f}", ha="center", va="bottom", fontsize=8)
    ratios = report["ratios"]
    assert isinstance(ratios, dict)
    ax.set_ylabel("tasks / s (median)")
    ax.set_title(
        f"probe vs bare LM forward: {ratios['probe_1_head_vs_bare_lm_throughput']:.2f}×; "
        f"WCO-3 cost vs 1 head: {ratios['wco_3_vs_1_head_cost']:.2f}×",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 avoids OpenMP spin "
                        "contention on a shared 2-core machine, which made timings swing 0.8–12 s)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    report = run(args.texts, args.repeats, args.batch_size)
    write_result("probe_throughput", report)
    plot(report, RESULTS / "probe_throughput.png")
    modes = report["modes"]
    assert isinstance(modes, dict)
    for name, row in modes.items():
        print(f"{name:<18} {row['tasks_per_s']:9.1f} tasks/s   median {row['median_s'] * 1000:8.1f} ms")
    print(json.dumps(report["ratios"], indent=2))


if __name__ == "__main__":
    main()
