"""The example trainer's solver: a character-level tiny Qwen2 that answers arith tasks in the daemon's
solver-prompt format (``Compute: EXPR\\nAnswer with a single integer.`` → ``42<eos>``).

It starts from supervised pretraining on *easy* arithmetic (small sums, differences and products, and
two-digit sums as the hard slice, :data:`EASY_MIX`), enough
that some of the daemon's tasks are in band (solved 1-3 of 8) at the start; the pretrained model is
cached on disk per settings, so reruns start in seconds. Held-out accuracy (greedy) on a fixed set
of two-digit sums measures what GRPO adds.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
from curriculum.domains.arith import ArithDomain, analyse
from curriculum.domains.base import Task

#: Bump when the pretraining recipe changes, so old caches are not reused.
RECIPE_VERSION = 5
#: The easy corpus: (share, kind). Small sums dominate; two-digit sums are the hard slice.
EASY_MIX = ((0.45, "small_add"), (0.15, "small_sub"), (0.15, "small_mul"), (0.25, "two_digit_add"))
_DOMAIN = ArithDomain()


@dataclass(frozen=True)
class PretrainSettings:
    """Every setting that shapes the pretrained solver (all of them key the cache)."""

    steps: int = 3500
    batch_size: int = 32
    lr: float = 3e-3
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    seed: int = 0

    def cache_key(self) -> str:
        blob = json.dumps({**asdict(self), "recipe": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _easy(rng: random.Random, kind: str) -> str:
    if kind == "small_add":  # one digit and up to two digits, either order
        a, b = rng.randint(0, 9), rng.randint(0, 99)
        return f"{a}+{b}" if rng.random() < 0.5 else f"{b}+{a}"
    if kind == "small_sub":
        return f"{rng.randint(0, 99)}-{rng.randint(0, 9)}"
    if kind == "small_mul":
        return f"{rng.randint(0, 9)}*{rng.randint(0, 9)}"
    return two_digit_sum(rng)


def two_digit_sum(rng: random.Random) -> str:
    return f"{rng.randint(10, 99)}+{rng.randint(10, 99)}"


def easy_expressions(rng: random.Random, n: int) -> list[str]:
    """``n`` random easy expressions drawn with :data:`EASY_MIX`."""
    kinds = rng.choices([k for _, k in EASY_MIX], weights=[w for w, _ in EASY_MIX], k=n)
    return [_easy(rng, k) for k in kinds]


def solver_prompt(expr: str) -> str:
    """The daemon's solver prompt for ``expr`` (the arith domain's own)."""
    return _DOMAIN.solver_prompt(Task("arith", expr))


#: Held-out sets: ``sums``, two-digit sums (the pretraining's hard slice); ``mix``, the generator's
#: bootstrap corpus mix within ``max_ops`` operators (the range a daemon of that domain serves).
HELD_OUT_KINDS = ("sums", "mix")


def held_out_set(n: int, seed: int = 12345, kind: str = "sums", max_ops: int = 3) -> list[str]:
    """A fixed held-out set of ``n`` expressions of ``kind`` (:data:`HELD_OUT_KINDS`), drawn with a seed of
    its own; ``mix`` holds distinct valid expressions of at most ``max_ops`` operators. Not disjoint from
    training: short expressions (``66-3``, ``3*0``) also occur in pretraining and corpus draws (~15 % of a
    512-problem mix appear among a 2,500-step pretraining's expressions)."""
    rng = random.Random(f"held-out-{seed}" if kind == "sums" else f"held-out-{kind}-{max_ops}-{seed}")
    if kind == "sums":
        return [two_digit_sum(rng) for _ in range(n)]
    if kind != "mix":
        raise ValueError(f"unknown held-out kind {kind!r}: choose one of {', '.join(HELD_OUT_KINDS)}")
    from curriculum.rl.bootstrap import expression_batch

    domain, out, seen = ArithDomain(max_ops=max_ops), list[str](), set[str]()
    for _ in range(50):
        if len(out) >= n:
            return out
        for v in domain.validate_batch(expression_batch(rng, 4 * n)):
            if v.valid and v.task.content_hash not in seen and len(out) < n:
                seen.add(v.task.content_hash)
                out.append(v.task.text)
    if len(out) < n:
        raise ValueError(f"only {len(out)} distinct expressions of at most {max_ops} operators found for a held-out "
                         f"set of {n}: ask for fewer")
    return out


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _encode(tokenizer: Any, exprs: list[str]) -> dict[str, torch.Tensor]:
    """Prompt + answer + EOS per row, right-padded; the loss covers the answer and EOS only."""
    eos, pad = int(tokenizer.eos_token_id), int(tokenizer.pad_token_id)
    # encoded as TRL and the daemon's hf solver encode prompts: ``tokenizer(text)`` (see _as_loaded)
    rows = [(_ids(tokenizer, solver_prompt(e)), [*_ids(tokenizer, str(analyse(e).value)), eos]) for e in exprs]
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, answer) in enumerate(rows):
        seq = prompt + answer
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
        labels[i, len(prompt):len(seq)] = torch.tensor(answer)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _as_loaded(model: Any, tokenizer: Any) -> Any:
    """The tokenizer as ``AutoTokenizer`` loads it back from a saved model folder: what TRL here and the
    daemon's hf solver use. Under transformers 5 that is a ``Qwen2Tokenizer`` (the model type picks it)
    whose pre-tokenizer drops the prompt's whitespace, which the freshly built tokenizer keeps; training
    on the fresh one would teach prompts that generation never sees."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        save_tiny(model, tokenizer, Path(tmp))
        return AutoTokenizer.from_pretrained(tmp)


def pretrain(settings: PretrainSettings, say: Any = print) -> tuple[Any, Any]:
    """A fresh tiny solver trained ``settings.steps`` supervised steps on easy arithmetic."""
    built = build_char_tokenizer()
    model = tiny_qwen2(built, hidden_size=settings.hidden_size, num_layers=settings.num_layers,
                       num_heads=settings.num_heads, seed=settings.seed)
    tokenizer = _as_loaded(model, built)
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    warmup = max(1, min(100, settings.steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min((s + 1) / warmup, 0.1 + 0.9 * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(1, settings.steps))))))
    model.train()
    started, smoothed = time.perf_counter(), float("nan")
    for step in range(1, settings.steps + 1):
        loss = model(**_encode(tokenizer, easy_expressions(rng, settings.batch_size))).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        value = float(loss.detach())
        smoothed = value if math.isnan(smoothed) else 0.95 * smoothed + 0.05 * value
        if step % 250 == 0 or step == settings.steps:
            say(f"pretrain {step}/{settings.steps} · loss {smoothed:.3f} · {time.perf_counter() - started:.0f} s")
    model.eval()
    return model, tokenizer


def pretrained(settings: PretrainSettings, cache: Path, say: Any = print) -> Path:
    """The pretrained solver's folder under ``cache`` (trained once per settings, then reused)."""
    target = Path(cache) / settings.cache_key()
    if (target / "pretrain.json").exists():
        say(f"pretrained solver reused from {target}")
        return target
    say(f"pretraining the solver ({settings.steps} steps on easy arithmetic) → {target}")
    started = time.perf_counter()
    model, tokenizer = pretrain(settings, say)
    save_checkpoint(model, tokenizer, target)
    (target / "pretrain.json").write_text(json.dumps(
        {"settings": asdict(settings), "recipe": RECIPE_VERSION, "train_s": time.perf_counter() - started}, indent=2))
    return target


def save_checkpoint(model: Any, tokenizer: Any, target: Path) -> Path:
    """Save model and tokenizer to ``target`` so that a reader sees no folder or a complete one
    (written beside it, then renamed; an existing folder of that name is replaced)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    save_tiny(model, tokenizer, staging)
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return target


def load(path: Path) -> tuple[Any, Any]:
    """Model and tokenizer from a saved folder (the pretrained solver or a checkpoint)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@torch.no_grad()
def accuracy(model: Any, tokenizer: Any, exprs: list[str], max_new_tokens: int = 8, batch: int = 128) -> float:
    """Share of ``exprs`` answered exactly (greedy decoding, the arith grader)."""
    if not exprs:
        return float("nan")
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    right = 0
    for start in range(0, len(exprs), batch):
        part = exprs[start:start + batch]
        enc = tokenizer([solver_prompt(e) for e in part], return_tensors="pt", padding=True)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        right += sum(bool(_DOMAIN.grade(Task("arith", e, {"answer": analyse(e).value}), t))
                     for e, t in zip(part, texts, strict=True))
    model.train(was_training)
    return right / len(exprs)
