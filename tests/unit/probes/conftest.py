"""Shared fixtures: a tiny char-level Qwen2 reference and a synthetic labelled task set."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from curriculum.common.tinymodels import build_char_tokenizer, save_tiny, tiny_qwen2
from probes import FrozenReference

ALPHABET = "0123456789+-"


def synthetic_texts(n: int, seed: int = 0) -> tuple[list[str], list[int]]:
    """Half the texts contain a '*' (label 1), half do not (label 0); lengths 6–16."""
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(n):
        chars = [rng.choice(ALPHABET) for _ in range(rng.randint(6, 16))]
        label = i % 2
        if label:
            chars[rng.randrange(len(chars))] = "*"
        texts.append("".join(chars) + "=")
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="session")
def tiny_parts():
    tokenizer = build_char_tokenizer()
    model = tiny_qwen2(tokenizer, hidden_size=64, num_layers=2, seed=0)
    return model, tokenizer


@pytest.fixture(scope="session")
def reference(tiny_parts) -> FrozenReference:
    model, tokenizer = tiny_parts
    return FrozenReference(model, tokenizer, model_id="tiny-qwen2-test")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory, tiny_parts) -> Path:
    model, tokenizer = tiny_parts
    return save_tiny(model, tokenizer, tmp_path_factory.mktemp("tiny_ref"))


def state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_bit_identical(before: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key, tensor in before.items():
        assert torch.equal(tensor, after[key]), f"reference parameter {key} changed"
