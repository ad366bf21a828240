"""A tiny char-level LM learns to write bug specs, and its samples become verified bugs (slow:
a few hundred CPU training steps, then real sandboxed verification)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from curriculum.common.tinymodels import build_char_tokenizer, tiny_qwen2
from curriculum.domains.swe.cli import fetch_and_preflight
from curriculum.domains.swe.domain import TINY_PROMPT, SweDomain

from .conftest import POLICY, fixture_registry

STEPS = 150


def encode(tokenizer, lines: list[str]) -> dict[str, torch.Tensor]:
    eos, pad = int(tokenizer.eos_token_id), int(tokenizer.pad_token_id)
    seqs = [[*tokenizer.convert_tokens_to_ids(list(TINY_PROMPT + line)), eos] for line in lines]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tiny_lm_spec_generator_end_to_end(tmp_path: Path) -> None:
    lab = fixture_registry(tmp_path)
    fetch_and_preflight(tmp_path / "cache", [lab], runner="rlimit", bundled_registry=False, policy=POLICY)
    domain = SweDomain(tmp_path / "cache", [lab], bundled_registry=False, runner="rlimit", policy=POLICY,
                       prompt_style="tiny")
    corpus = domain.spec_corpus(4000, seed=0)
    tokenizer = build_char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=64, num_layers=2, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(0)
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3)
    rng = random.Random(0)
    model.train()
    for _ in range(STEPS):
        loss = model(**encode(tokenizer, rng.sample(corpus, 16))).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
    model.eval()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    prompt = torch.tensor([tokenizer.convert_tokens_to_ids(list(domain.generator_prompts(1, 0)[0]))])
    with torch.no_grad():
        torch.manual_seed(1)
        gen = model.generate(input_ids=prompt.repeat(24, 1), attention_mask=torch.ones(24, prompt.shape[1],
                             dtype=torch.long), do_sample=True, temperature=1.0, top_k=0, max_new_tokens=80,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    samples = tokenizer.batch_decode(gen[:, prompt.shape[1]:], skip_special_tokens=True)
    parsed = [domain.parse(s) for s in samples]
    tasks = [p.task for p in parsed if p.task is not None]
    print(f"tiny generator: {len(tasks)}/{len(samples)} samples parse into applicable bug specs")
    assert len(tasks) >= len(samples) // 4  # 150 steps: about half parse (11/24 measured)
    checked = [domain.check(t) for t in tasks[:6]]
    assert any(v.valid for v in checked), [v.reason for v in checked]
