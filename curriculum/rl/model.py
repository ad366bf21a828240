"""Stage 1 — load the trainable generator and attach, save, reload and hash its LoRA adapter.

The generator is loaded with ``AutoModelForCausalLM`` (a hub id or a local directory; offline
directories work). Only the adapter is trainable; the base weights stay untouched, which the tests
check bit for bit. :func:`adapter_hash` is the provenance stamp stored with every emitted task.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from curriculum.rl.config import LoraSettings


def load_base(path_or_id: str, dtype: torch.dtype | None = None, device: str = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)`` for the generator; the tokenizer gets a pad token if it lacks one."""
    from transformers import AutoModelForCausalLM

    from probes.reference import load_tokenizer

    tokenizer = load_tokenizer(path_or_id)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    kwargs: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
    model = AutoModelForCausalLM.from_pretrained(path_or_id, **kwargs)
    model = model.to(device)  # type: ignore[arg-type]
    return model, tokenizer


def present_targets(model: nn.Module, requested: tuple[str, ...]) -> list[str]:
    """The requested projection names that exist in ``model`` (raises if none do)."""
    leaves = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    found = [name for name in requested if name in leaves]
    if not found:
        raise ValueError(f"none of the LoRA target modules {list(requested)} exist in {type(model).__name__}")
    return found


def attach_lora(model: nn.Module, settings: LoraSettings, seed: int = 0) -> Any:
    """Wrap ``model`` in a PEFT ``PeftModel`` with a fresh, deterministic LoRA adapter."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
        target_modules=present_targets(model, settings.target_modules), task_type="CAUSAL_LM", bias="none",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def load_adapter(base: nn.Module, adapter_dir: str | Path, trainable: bool = True) -> Any:
    """Reload a saved adapter onto ``base``; ``is_trainable=True`` so training can continue."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=trainable)


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The LoRA tensors (name → detached CPU copy), sorted by name."""
    items = {name: p.detach().cpu().clone() for name, p in model.named_parameters() if "lora_" in name}
    if not items:
        raise ValueError(f"{type(model).__name__} has no LoRA parameters")
    return dict(sorted(items.items()))


def adapter_hash(model: nn.Module) -> str:
    """``"adapter-" + sha256[:16]`` over every LoRA tensor (name, dtype, shape, bytes)."""
    hasher = hashlib.sha256()
    for name, tensor in adapter_state(model).items():
        flat = tensor.contiguous().view(-1).view(torch.uint8) if tensor.numel() else tensor
        hasher.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        hasher.update(flat.numpy().tobytes())
    return "adapter-" + hasher.hexdigest()[:16]


def base_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Non-LoRA parameters (detached copies) — what must never change during RL."""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if "lora_" not in name}


def save_adapter(model: Any, directory: str | Path) -> Path:
    """``save_pretrained`` the adapter only (PEFT writes ``adapter_model.safetensors``)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    return path
