"""In-process ``transformers`` solver: batched sampling of ``n`` completions per prompt (CPU-capable).

Use it for small solvers and tests; production solvers run behind vLLM (``openai`` backend). In a
Celery worker, construct it inside the worker process (after fork), never in the parent: CUDA
must not be initialised before a fork.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from curriculum.solvers.base import Completion, Sampling


class HFSolver:
    """Sample from a causal LM loaded with ``AutoModelForCausalLM`` (a hub id or a local directory)."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "local", batch_size: int = 16,
                 device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = batch_size
        self.device = device
        self.solver_id = f"hf:{name}"

    @classmethod
    def from_pretrained(cls, name_or_path: str, revision: str | None = None, **kw: Any) -> HFSolver:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name_or_path, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, revision=revision)
        return cls(model, tok, name=name_or_path, **kw)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        out: list[list[Completion]] = []
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        per_batch = max(1, self.batch_size // n)
        for i in range(0, len(prompts), per_batch):
            out += self._batch(prompts[i:i + per_batch], n, sampling)
        return out

    def _batch(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.device)
        start = time.perf_counter()
        gen = self.model.generate(
            **enc, do_sample=sampling.temperature > 0, temperature=max(sampling.temperature, 1e-5),
            top_p=sampling.top_p, max_new_tokens=sampling.max_tokens, num_return_sequences=n,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        latency = (time.perf_counter() - start) / max(1, len(prompts) * n)
        texts = self.tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for stop in sampling.stop:
            texts = [t.split(stop, 1)[0] for t in texts]
        return [[Completion(t, latency_s=latency) for t in texts[j * n:(j + 1) * n]] for j in range(len(prompts))]
