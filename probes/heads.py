"""Probe heads: standardise the pooled vector, then linear / MLP / deep MLP → one logit.

The standardisation (per-feature mean and std of the training set) is part of the head and is
saved with it, so a loaded probe needs nothing but the raw pooled features.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn

Architecture = Literal["linear", "mlp", "deep_mlp"]
ARCHITECTURES: tuple[str, ...] = ("linear", "mlp", "deep_mlp")


def build_body(arch: str, input_dim: int, hidden_dim: int, dropout: float) -> nn.Sequential:
    """The trainable part: ``linear`` = one affine map; ``mlp`` = 1 hidden layer; ``deep_mlp`` = 3."""
    if arch == "linear":
        return nn.Sequential(nn.Linear(input_dim, 1))
    if arch == "mlp":
        return nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden_dim, 1))
    if arch == "deep_mlp":
        layers: list[nn.Module] = []
        width = input_dim
        for _ in range(3):
            layers += [nn.Linear(width, hidden_dim), nn.GELU(), nn.Dropout(dropout)]
            width = hidden_dim
        return nn.Sequential(*layers, nn.Linear(width, 1))
    raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


class ProbeHead(nn.Module):
    """``logit = body((x - mean) / std)``; ``forward`` returns raw logits of shape ``(B,)``."""

    def __init__(self, arch: str, input_dim: int, hidden_dim: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        if input_dim < 1:
            raise ValueError(f"input_dim must be ≥ 1, got {input_dim}")
        self.arch = arch
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.dropout = dropout
        self.body = build_body(arch, input_dim, hidden_dim, dropout)
        self.feature_mean: torch.Tensor
        self.feature_std: torch.Tensor
        self.register_buffer("feature_mean", torch.zeros(input_dim))
        self.register_buffer("feature_std", torch.ones(input_dim))

    def set_standardisation(self, features: np.ndarray) -> None:
        """Fit the input standardisation on training features ``(N, input_dim)``."""
        x = torch.as_tensor(features, dtype=torch.float32)
        self.feature_mean.copy_(x.mean(dim=0))
        self.feature_std.copy_(x.std(dim=0, unbiased=False).clamp_min(1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.input_dim:
            raise ValueError(f"probe expects {self.input_dim}-dim features, got {x.shape[-1]}")
        z = (x - self.feature_mean) / self.feature_std
        return self.body(z).squeeze(-1)

    @torch.inference_mode()
    def logits(self, features: np.ndarray | torch.Tensor) -> np.ndarray:
        """Raw logits for ``(N, input_dim)`` features (eval mode, float64 numpy out)."""
        was_training = self.training
        self.eval()
        try:
            x = torch.as_tensor(features, dtype=torch.float32)
            return self.forward(x).double().cpu().numpy()
        finally:
            self.train(was_training)

    def probabilities(self, features: np.ndarray | torch.Tensor) -> np.ndarray:
        """Positive-class probabilities, ``sigmoid(logits)``."""
        return sigmoid(self.logits(features))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))
    return out
