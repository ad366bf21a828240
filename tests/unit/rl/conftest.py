"""Fixtures for generator-RL tests: a briefly pretrained tiny generator, a *different* tiny frozen
reference, and a probe trained on that reference (all built in seconds, no downloads)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from curriculum.domains.arith import GENERATOR_PROMPT, ArithDomain, complexity, random_expression
from curriculum.domains.base import Task
from probes import FeatureExtractor, FeatureSpec, FrozenReference, Probe, ProbeScorer, TrainConfig, train_probe

SPEC = FeatureSpec(layer=-1, pooling="mean_full")


@pytest.fixture(scope="session")
def tok():
    from curriculum.common.tinymodels import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="session")
def pretrained_state(tok):
    """State dict of a hidden-64, 2-layer generator pretrained for a few seconds on arithmetic."""
    return {k: v.clone() for k, v in quick_pretrained(tok, 64, 2, seed=0).state_dict().items()}


def quick_pretrained(tok, hidden: int, layers: int, seed: int):
    """A tiny Qwen2 generator pretrained for a few seconds (valid enough to give GRPO reward spread)."""
    from curriculum.common.tinymodels import tiny_qwen2
    from curriculum.rl.bootstrap import BootstrapSettings, train

    torch.set_num_threads(1)
    model = tiny_qwen2(tok, hidden_size=hidden, num_layers=layers, seed=seed)
    settings = BootstrapSettings(steps=60, batch_size=32, lr=1e-2, warmup_steps=5, hidden_size=hidden,
                                 num_layers=layers, seed=seed)
    train(model, tok, settings, show_progress=False)
    return model


@pytest.fixture
def generator(tok, pretrained_state):
    from curriculum.common.tinymodels import tiny_qwen2

    model = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    model.load_state_dict(pretrained_state)
    return model


@pytest.fixture(scope="session")
def reference(tok) -> FrozenReference:
    """A frozen reference with a different architecture from the generator (hidden 32, 1 layer)."""
    from curriculum.common.tinymodels import tiny_qwen2

    return FrozenReference(tiny_qwen2(tok, hidden_size=32, num_layers=1, seed=7), tok, model_id="tiny-ref-32x1")


def arith_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [GENERATOR_PROMPT + random_expression(rng, rng.randint(1, 6)) for _ in range(n)]


def train_test_probe(reference: FrozenReference, arch: str = "mlp", seed: int = 0, name: str = "probe") -> Probe:
    """A probe on ``reference`` features whose label is 'complexity in the middle band'."""
    texts = arith_texts(96, seed)
    labels = np.array([int(5.0 <= complexity(Task("arith", t[2:])) <= 8.0) for t in texts])
    x = FeatureExtractor(reference).extract(texts, [SPEC])[SPEC]
    head = train_probe(x, labels, arch, "weighted", TrainConfig(max_epochs=30, seed=seed, hidden_dim=16)).head
    return Probe(head, SPEC, reference.model_id, reference.fingerprint, reference.hidden_size, band=(1, 3), k=8,
                 name=name)


@pytest.fixture(scope="session")
def probe(reference: FrozenReference) -> Probe:
    return train_test_probe(reference)


@pytest.fixture(scope="session")
def scorer(reference: FrozenReference, probe: Probe) -> ProbeScorer:
    return ProbeScorer(reference, probe)


@pytest.fixture
def domain() -> ArithDomain:
    return ArithDomain()
