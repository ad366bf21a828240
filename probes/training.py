"""Train one probe head on pooled features: AdamW, class balance, early stopping, seeded.

Determinism: the head's initial weights, the downsampling and every shuffle come from
generators seeded with ``TrainConfig.seed``; the global torch RNG is left as it was. Two runs
with the same inputs and config give bit-identical heads on the same machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from probes.heads import ARCHITECTURES, ProbeHead
from probes.metrics import balanced_accuracy

Balance = Literal["downsample", "weighted", "none"]
BALANCES: tuple[str, ...] = ("downsample", "weighted", "none")


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and stopping settings (defaults are small-corpus friendly)."""

    lr: float = 1e-3
    weight_decay: float = 1e-2
    batch_size: int = 64
    max_epochs: int = 100
    patience: int = 10
    hidden_dim: int = 256
    dropout: float = 0.1
    seed: int = 0
    monitor: Literal["val_loss", "val_balanced_accuracy"] = "val_loss"

    def __post_init__(self) -> None:
        checks = {"lr": self.lr > 0, "batch_size": self.batch_size >= 1, "max_epochs": self.max_epochs >= 1}
        checks |= {"patience": self.patience >= 1, "hidden_dim": self.hidden_dim >= 1, "dropout": 0 <= self.dropout < 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid TrainConfig fields: {', '.join(bad)} (lr>0, sizes ≥1, patience ≥1, 0≤dropout<1)")
        if self.weight_decay < 0:
            raise ValueError("weight_decay must be ≥ 0")


@dataclass
class TrainResult:
    head: ProbeHead
    best_epoch: int
    epochs_run: int
    train_rows: int
    history: list[dict[str, float]] = field(default_factory=list)


def balance_indices(labels: np.ndarray, balance: str, seed: int) -> np.ndarray:
    """Row indices to train on: all rows, or (``downsample``) the minority class plus an equal random
    subset of the majority class."""
    if balance not in BALANCES:
        raise ValueError(f"unknown balance {balance!r}; choose one of {', '.join(BALANCES)}")
    idx = np.arange(labels.size)
    if balance != "downsample":
        return idx
    pos, neg = idx[labels == 1], idx[labels == 0]
    if pos.size == 0 or neg.size == 0:
        raise ValueError(f"cannot downsample: training labels have {pos.size} positives and {neg.size} negatives")
    rng = np.random.default_rng(seed)
    n = min(pos.size, neg.size)
    keep = np.concatenate([rng.choice(pos, n, replace=False), rng.choice(neg, n, replace=False)])
    return np.sort(keep)


def _pos_weight(labels: np.ndarray, balance: str) -> torch.Tensor | None:
    if balance != "weighted":
        return None
    n_pos = float(labels.sum())
    if n_pos == 0 or n_pos == labels.size:
        raise ValueError("weighted loss needs both classes in the training labels")
    return torch.tensor((labels.size - n_pos) / n_pos)


def _check_inputs(x: np.ndarray, y: np.ndarray, what: str) -> None:
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{what}: expected features (N, D) and labels (N,), got {x.shape} and {y.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{what}: features contain NaN or inf")


def _new_head(arch: str, dim: int, config: TrainConfig) -> ProbeHead:
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return ProbeHead(arch, dim, hidden_dim=config.hidden_dim, dropout=config.dropout)


def _validation_score(
    head: ProbeHead, loss_fn: nn.Module, x_val: torch.Tensor, y_val: torch.Tensor, monitor: str
) -> tuple[float, float]:
    """(value to maximise, validation loss)."""
    head.eval()
    with torch.no_grad():
        logits = head(x_val)
        loss = float(loss_fn(logits, y_val))
    head.train()
    if monitor == "val_loss":
        return -loss, loss
    pred = (logits >= 0).long().numpy()
    return balanced_accuracy(y_val.long().numpy(), pred), loss


def train_probe(
    x_train: np.ndarray,
    y_train: np.ndarray,
    arch: str,
    balance: str = "downsample",
    config: TrainConfig | None = None,
    x_val: np.ndarray | None = None,
    y_val: np.ndarray | None = None,
) -> TrainResult:
    """Fit a head; with a validation set, keep the best epoch and stop after ``patience`` bad ones."""
    config = config or TrainConfig()
    y_train = np.asarray(y_train).astype(int)
    _check_inputs(x_train, y_train, "training set")
    rows = balance_indices(y_train, balance, config.seed)
    x_fit, y_fit = x_train[rows], y_train[rows]
    head = _new_head(arch, x_train.shape[1], config)
    head.set_standardisation(x_fit)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=_pos_weight(y_fit, balance))
    optimiser = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    xt, yt = torch.as_tensor(x_fit, dtype=torch.float32), torch.as_tensor(y_fit, dtype=torch.float32)
    has_val = x_val is not None and y_val is not None and len(y_val) > 0
    if has_val:
        assert x_val is not None and y_val is not None
        _check_inputs(x_val, np.asarray(y_val), "validation set")
        xv, yv = torch.as_tensor(x_val, dtype=torch.float32), torch.as_tensor(np.asarray(y_val), dtype=torch.float32)
    generator = torch.Generator().manual_seed(config.seed)
    best_score, best_epoch, best_state, bad_epochs = -float("inf"), 0, None, 0
    history: list[dict[str, float]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # dropout masks
        head.train()
        for epoch in range(1, config.max_epochs + 1):
            train_loss = _run_epoch(head, loss_fn, optimiser, xt, yt, config.batch_size, generator)
            record = {"epoch": float(epoch), "train_loss": train_loss}
            if has_val:
                score, val_loss = _validation_score(head, loss_fn, xv, yv, config.monitor)
                record["val_loss"] = val_loss
                if score > best_score:
                    best_score, best_epoch, bad_epochs = score, epoch, 0
                    best_state = {k: v.clone() for k, v in head.state_dict().items()}
                else:
                    bad_epochs += 1
            history.append(record)
            if has_val and bad_epochs >= config.patience:
                break
    if best_state is not None:
        head.load_state_dict(best_state)
    head.eval()
    return TrainResult(head, best_epoch or len(history), len(history), int(rows.size), history)


def _run_epoch(
    head: ProbeHead,
    loss_fn: nn.Module,
    optimiser: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    generator: torch.Generator,
) -> float:
    order = torch.randperm(x.shape[0], generator=generator)
    total = 0.0
    for start in range(0, x.shape[0], batch_size):
        idx = order[start : start + batch_size]
        optimiser.zero_grad(set_to_none=True)
        loss = loss_fn(head(x[idx]), y[idx])
        loss.backward()
        optimiser.step()
        total += float(loss.detach()) * idx.numel()
    return total / max(1, x.shape[0])
