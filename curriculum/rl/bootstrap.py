"""Offline bootstrap of a tiny generator for the ``arith`` and ``swe`` domains.

No weights can be downloaded here, so the toy pipeline starts from a character-level tokenizer
(:func:`curriculum.common.tinymodels.build_char_tokenizer`) and a ~1M-parameter Qwen2 model
(:func:`curriculum.common.tinymodels.tiny_qwen2`) pretrained with a plain torch loop on random arithmetic
expressions of mixed complexity (1–6 operators, see :data:`OP_COUNT_WEIGHTS`). Each training
sequence is the generator prompt ``"Q:"`` followed by the expression and EOS, with no BOS, exactly
what the generator later sees.

The result is cached under ``<data_dir>/bootstrap/arith/<key>/`` where ``key`` hashes every
training setting; a second call with the same settings reuses it (``reused=True``). The directory
holds ``save_pretrained`` output for model and tokenizer and ``bootstrap.json`` with the settings,
the parameter count, the training time and the measured validity (share of sampled completions at
temperature 1 that the domain accepts).

``swe`` (the CPU default of the SWE domain): the same model and loop on bug spec lines
(``REPO FILE::FUNCTION OPERATOR SITE``) drawn uniformly from the spec space of the configured,
preflighted repositories, after the prompt ``"BUG: "``; its validity is the share of samples that are
applicable specs (parsed and applied by the mutator; the verifier's suite runs are left to the
daemon). The corpus is keyed by its content, so other repositories train another model
(:mod:`curriculum.domains.swe.bootstrap_corpus`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2ForCausalLM

from curriculum.common.cpu_share import ThreadGovernor
from curriculum.common.pretrain_corpus import Corpus
from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
from curriculum.domains.arith import GENERATOR_PROMPT, ArithDomain, random_expression
from probes.progress import ProgressReporter, progress_note

#: Bump when the corpus recipe changes, so old caches are not reused.
CORPUS_VERSION = 2
#: Operator-count mix of the corpus (1..6 operators): mostly short, some long. Sampling at
#: temperature 1 overshoots the count now and then, so 6-operator sequences are kept rare.
OP_COUNT_WEIGHTS = (4, 4, 4, 3, 2, 1)
BOOTSTRAP_DOMAINS = ("arith", "swe")
META_FILE = "bootstrap.json"


def arith_corpus() -> Corpus:
    def validity(samples: list[str]) -> float:
        return sum(v.valid for v in ArithDomain().validate_batch(samples)) / max(1, len(samples))

    return Corpus(GENERATOR_PROMPT, expression_batch, validity)


def domain_corpus(domain: str, options: dict[str, Any] | None = None) -> Corpus:
    """The pretraining corpus of ``domain`` (``options``: the domain's, e.g. the SWE repository cache)."""
    if domain == "swe":
        from curriculum.domains.swe.bootstrap_corpus import spec_line_corpus

        return spec_line_corpus(options or {})
    return arith_corpus()


@dataclass(frozen=True)
class BootstrapSettings:
    """Every setting that influences the trained model (all of them key the cache)."""

    #: 1,800 steps: the only recipe benchmarks/bootstrap_recipe.py found holding ≥ 95 % validity on seeds 0
    #: and 1 (400, 600 and 1,200 steps: 91.6–94.7 % on seed 1); README "The first run".
    steps: int = 1800
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    hidden_size: int = 128
    num_layers: int = 6
    num_heads: int = 4
    seed: int = 0
    #: 1,024: the reported validity's standard error is 0.6 points at 96 % (512 samples: 0.9 points, and a seed
    #: that stopped on a 96.9 % check reported 94.5 % on its own 512, bootstrap_length_buckets.json).
    eval_samples: int = 1024
    max_new_tokens: int = 48
    #: Early stop (#38): from step ``stop_from``, every ``stop_every`` steps, sample ``stop_samples`` completions
    #: at seed + 2 (independent of the reported validity's sample at seed + 1) and stop once ``stop_validity``
    #: of them are valid; 0 trains the whole schedule. benchmarks/bootstrap_trace.py: both seeds ≥ 95 % from
    #: step 1,050 of 1,800 and 95–98 % after; at 1,024 samples, 96.5 % is 2.2 standard errors above 95 %
    #: (a check takes ~2 s on 2 idle cores).
    stop_validity: float = 0.965
    stop_from: int = 900
    stop_every: int = 150
    stop_samples: int = 1024
    #: Length buckets (#38): each step's batch runs as this many micro-batches of similar length, each padded
    #: only to its own longest sequence. The loss stays the whole batch's mean over its tokens (same objective,
    #: same data; only float rounding differs). Half of a padded 64-row arith batch is padding: 3 buckets made 300
    #: steps 19 % faster on 2 idle cores (24.1 against 29.7 s; README "The first run"); 1 is one padded batch.
    length_buckets: int = 3

    def cache_key(self, corpus_key: str = "") -> str:
        data: dict[str, Any] = {**asdict(self), "corpus_version": CORPUS_VERSION}
        if corpus_key:
            data["corpus"] = corpus_key
        blob = json.dumps(data, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: The SWE recipe: spec lines are ~2× longer than expressions and the spec space is small, so fewer,
#: longer-sampled steps (the char model learns the line grammar in a few hundred steps).
SWE_SETTINGS = BootstrapSettings(steps=400, batch_size=32, warmup_steps=50, num_layers=4, max_new_tokens=96,
                                 eval_samples=256)


@dataclass(frozen=True)
class BootstrapResult:
    """Where the model is and how good it is."""

    path: Path
    validity: float
    reused: bool
    train_s: float
    n_params: int
    settings: BootstrapSettings
    #: Steps actually trained: fewer than ``settings.steps`` when the early stop fired.
    steps_trained: int = 0


def expression_batch(rng: random.Random, size: int) -> list[str]:
    """``size`` random expressions, operator counts 1–6 drawn with :data:`OP_COUNT_WEIGHTS`."""
    counts = rng.choices(range(1, 7), weights=OP_COUNT_WEIGHTS, k=size)
    return [random_expression(rng, n) for n in counts]


def char_ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of ``text`` with the character tokenizer (no special tokens added)."""
    ids = tokenizer.convert_tokens_to_ids(list(text))
    return [ids] if isinstance(ids, int) else list(ids)


def _encode_batch(tokenizer: PreTrainedTokenizerFast, exprs: list[str],
                  prompt: str = GENERATOR_PROMPT) -> dict[str, torch.Tensor]:
    eos, pad = int(tokenizer.eos_token_id), int(tokenizer.pad_token_id)
    seqs = [[*char_ids(tokenizer, prompt + e), eos] for e in exprs]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batch_loss_backward(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, texts: list[str],
                        prompt: str, buckets: int = 1) -> float:
    """Backpropagate the mean next-token loss of ``texts`` (after ``prompt``) and return it: computed in
    ``buckets`` micro-batches of length-sorted texts, each padded to its own longest, whose summed token
    losses are divided by the whole batch's count of predicted tokens (so any ``buckets`` gives the same
    loss and gradient, up to float rounding)."""
    ordered = sorted(texts, key=len) if buckets > 1 else list(texts)
    n = len(ordered)
    parts = [ordered[i * n // buckets:(i + 1) * n // buckets] for i in range(max(1, buckets))]
    batches = [_encode_batch(tokenizer, part, prompt) for part in parts if part]
    # A row of length L predicts L - 1 tokens (the labels are shifted inside the model).
    predicted = sum(int(b["attention_mask"].sum()) - len(b["attention_mask"]) for b in batches)
    total = 0.0
    for batch in batches:
        loss = model(**batch, num_items_in_batch=predicted).loss
        loss.backward()
        total += float(loss.detach())
    return total


def _lr_factor(step: int, settings: BootstrapSettings) -> float:
    if step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    span = max(1, settings.steps - settings.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - settings.warmup_steps) / span))


def train(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: BootstrapSettings,
          show_progress: bool = True, corpus: Corpus | None = None,
          threads: ThreadGovernor | None = None,
          on_step: Callable[[int], bool | None] | None = None) -> tuple[float, int]:
    """Pretrain ``model`` in place on ``corpus`` (default: arith); returns the final (smoothed) loss and the
    steps trained. ``threads`` re-decides torch's thread count as the machine's load changes (None: leave
    it); ``on_step`` is called with the number of steps done after each one (measurements along the way)
    and stops the training when it returns True (the early stop)."""
    corpus = corpus or arith_corpus()
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: _lr_factor(s, settings))
    model.train()
    smoothed, step = float("nan"), 0
    with ProgressReporter("bootstrap", settings.steps, unit="steps", mode=None if show_progress else "off") as bar:
        for step in range(1, settings.steps + 1):
            optim.zero_grad(set_to_none=True)
            value = batch_loss_backward(model, tokenizer, corpus.draw(rng, settings.batch_size), corpus.prompt,
                                        settings.length_buckets)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            smoothed = value if math.isnan(smoothed) else 0.95 * smoothed + 0.05 * value
            bar.advance(1, loss=smoothed)
            if threads is not None:
                threads.tick()
            if on_step is not None and on_step(step):
                break
    model.eval()
    return smoothed, step


@torch.no_grad()
def sample_completions(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, n: int, seed: int,
                       max_new_tokens: int = 48, prompt_text: str = GENERATOR_PROMPT) -> list[str]:
    """``n`` completions of the generator prompt at temperature 1 (deterministic in ``seed``)."""
    prompt = torch.tensor([char_ids(tokenizer, prompt_text)])
    generator: Any = model
    out: list[str] = []
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for start in range(0, n, 64):
            rows = min(64, n - start)
            ids = prompt.repeat(rows, 1)
            gen = generator.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            out.extend(tokenizer.batch_decode(gen[:, ids.shape[1]:], skip_special_tokens=True))
    return out


def measure_validity(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, n: int = 256,
                     seed: int = 1234, max_new_tokens: int = 48, corpus: Corpus | None = None) -> float:
    """Share of ``n`` sampled completions that ``corpus`` (default: arith) counts as valid."""
    corpus = corpus or arith_corpus()
    return corpus.validity(sample_completions(model, tokenizer, n, seed, max_new_tokens, corpus.prompt))


def early_stop(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: BootstrapSettings,
               corpus: Corpus, checks: list[dict[str, float]],
               say: Callable[[str], None] = progress_note) -> Callable[[int], bool]:
    """The ``on_step`` hook of the early stop: True once an independent sample (``stop_samples`` completions
    at seed + 2) reaches ``stop_validity``. Every check is appended to ``checks`` and said in one line."""
    def check(step: int) -> bool:
        if (settings.stop_validity <= 0 or step < settings.stop_from or step >= settings.steps
                or (step - settings.stop_from) % settings.stop_every):
            return False
        validity = measure_validity(model, tokenizer, settings.stop_samples, settings.seed + 2,
                                    settings.max_new_tokens, corpus)
        model.train()
        checks.append({"step": step, "validity": validity})
        done = validity >= settings.stop_validity
        say(f"bootstrap: step {step:,}: {validity:.1%} valid on a {settings.stop_samples}-sample check "
            f"(stop at ≥ {settings.stop_validity:.1%})" + (f": stopping, {step:,} of {settings.steps:,} steps"
                                                            if done else ": training on"))
        return done

    return check


def _silent(_: str) -> None:
    return None


def bootstrap_threads() -> ThreadGovernor:
    """Intra-op threads for the bootstrap: measured and re-measured by :class:`ThreadGovernor` (a second
    thread only while a second core is otherwise idle), or fixed by ``PROPEL_BOOTSTRAP_THREADS``.

    Same recipe, same quality either way; only the wall time changes (``benchmarks/bootstrap_threads.py``:
    idle, 2 threads are 1.6× faster than 1; under load, 2 threads were 14× slower)."""
    fixed = os.environ.get("PROPEL_BOOTSTRAP_THREADS", "").strip()
    if fixed and not (fixed.isdigit() and int(fixed) >= 1):
        raise ValueError(f"PROPEL_BOOTSTRAP_THREADS must be a whole number ≥ 1, got {fixed!r}: set it so, "
                         "or unset it to let the bootstrap measure the machine")
    return ThreadGovernor(fixed=int(fixed) if fixed else None)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the previous setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cache_dir(data_dir: Path, domain: str, settings: BootstrapSettings, corpus_key: str = "") -> Path:
    return Path(data_dir) / "bootstrap" / domain / settings.cache_key(corpus_key)


def bootstrap(domain: str = "arith", data_dir: Path | str = "data", steps: int | None = None,
              force: bool = False, show_progress: bool = True,
              settings: BootstrapSettings | None = None,
              domain_options: dict[str, Any] | None = None) -> BootstrapResult:
    """Build (or reuse) the tiny generator for ``domain``; ``steps`` overrides the step count.

    A small ``steps`` (e.g. 5) is the test mode: same code path, seconds instead of minutes.
    ``domain_options`` are the domain's (swe: which repository cache, registry, split, repos).
    Raises ``ValueError`` for a domain without a bootstrap recipe.
    """
    if domain not in BOOTSTRAP_DOMAINS:
        raise ValueError(f"no bootstrap recipe for domain {domain!r}; available: {', '.join(BOOTSTRAP_DOMAINS)}")
    settings = settings or (SWE_SETTINGS if domain == "swe" else BootstrapSettings())
    if steps is not None:
        settings = replace(settings, steps=steps, warmup_steps=min(settings.warmup_steps, max(1, steps // 5)))
    corpus = domain_corpus(domain, domain_options)
    target = cache_dir(Path(data_dir), domain, settings, corpus.key)
    meta_path = target / META_FILE
    if meta_path.exists() and not force:
        meta = json.loads(meta_path.read_text())
        return BootstrapResult(target, float(meta["validity"]), True, float(meta["train_s"]),
                               int(meta["n_params"]), settings, int(meta.get("steps_trained", settings.steps)))
    tokenizer = build_char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=settings.hidden_size, num_layers=settings.num_layers,
                       num_heads=settings.num_heads, seed=settings.seed)
    n_params = sum(p.numel() for p in model.parameters())
    checks: list[dict[str, float]] = []
    stop = early_stop(model, tokenizer, settings, corpus, checks, progress_note if show_progress else _silent)
    with bootstrap_threads() as threads:
        started = time.perf_counter()
        loss, trained = train(model, tokenizer, settings, show_progress=show_progress, corpus=corpus,
                              threads=threads, on_step=stop)
        train_s = time.perf_counter() - started
        validity = measure_validity(model, tokenizer, settings.eval_samples, settings.seed + 1,
                                    settings.max_new_tokens, corpus)
    save_tiny(model, tokenizer, target)
    meta = {"domain": domain, "settings": asdict(settings), "corpus_version": CORPUS_VERSION,
            "n_params": n_params, "train_s": train_s, "final_loss": loss, "validity": validity,
            "generator_prompt": corpus.prompt, "corpus": corpus.key, "created_at": time.time(),
            "torch_threads": [t for t, _ in threads.changes], "steps_trained": trained, "stop_checks": checks}
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return BootstrapResult(target, validity, False, train_s, n_params, settings, trained)


def load_bootstrapped(path: Path) -> tuple[Any, Any]:
    """Load a bootstrapped model and its tokenizer from ``path``."""
    from probes.reference import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = load_tokenizer(str(path))
    return model, tokenizer
