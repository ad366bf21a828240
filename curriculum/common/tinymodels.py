"""Tiny, locally built language models for tests, demos and benchmarks.

No weights can be downloaded on the machines this project is developed and tested on, so the
embedded demo and the test-suite build their models here: a character-level tokenizer made with
the ``tokenizers`` library (wrapped in ``PreTrainedTokenizerFast`` so every ``transformers`` and
TRL code path sees a normal tokenizer) and a ``Qwen2ForCausalLM`` with a hidden size of 64–128.

The same code paths load real models (``Qwen/...``) through ``AutoModelForCausalLM`` elsewhere;
nothing here is a mock of a model, only a small one.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
#: Characters that the arithmetic demo and most tests need; printable ASCII covers code snippets too.
DEFAULT_ALPHABET = string.digits + string.ascii_letters + string.punctuation + " \n"


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per character of ``alphabet``, plus 4 specials.

    Unknown characters map to ``<unk>``. ``padding_side`` is left, which is what batched
    generation wants; callers that need right padding set it on the returned object.
    """
    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
    )
    return tok


def tiny_qwen2_config(
    vocab_size: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 512,
    pad_token_id: int = 0,
    bos_token_id: int = 1,
    eos_token_id: int = 2,
) -> Qwen2Config:
    """A small ``Qwen2Config``; ``hidden_size`` must divide by ``num_heads``."""
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} must be divisible by num_heads {num_heads}")
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )


def tiny_qwen2(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
) -> Qwen2ForCausalLM:
    """A randomly initialised tiny Qwen2 causal LM matching ``tokenizer`` (deterministic per seed)."""
    config = tiny_qwen2_config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        pad_token_id=int(tokenizer.pad_token_id),
        bos_token_id=int(tokenizer.bos_token_id),
        eos_token_id=int(tokenizer.eos_token_id),
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def save_tiny(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    """Save model and tokenizer so ``AutoModelForCausalLM.from_pretrained(path)`` loads them."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
