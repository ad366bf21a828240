"""Sampling from the current policy (the daemon's sample phase and the evaluation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


@torch.no_grad()
def sample_completions(model: Any, tokenizer: Any, prompts: Sequence[str], seed: int, temperature: float = 1.0,
                       top_p: float = 1.0, max_new_tokens: int = 48, batch_size: int = 64) -> list[str]:
    """One completion per prompt (decoded without special tokens), deterministic in ``seed``.

    Runs in eval mode under a forked RNG, so sampling never disturbs the training RNG stream.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[str] = []
    previous_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                chunk = list(prompts[start : start + batch_size])
                enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
                gen = model.generate(
                    **enc, do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                    max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                )
                out.extend(tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True))
    finally:
        tokenizer.padding_side = previous_side
        model.train(was_training)
    return out
