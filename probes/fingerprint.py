"""Reference-model fingerprint: the "revision" stamped into every probe artifact.

``model_fingerprint`` hashes (sha256) the model class name, its config (as sorted JSON, minus
fields that name where or with which library version it was loaded or saved) followed by every
state-dict entry in sorted name order: the name, dtype, shape and the raw little-endian bytes of
the tensor, which is the byte content a safetensors file of the state dict holds. Two loads of the same weights give the
same fingerprint; changing one weight, the dtype or the architecture changes it.

Cost is one pass over the weights (≈1–2 GB/s on one core); the result is memoised on the module
object, keyed by the ``id`` of its parameters, so a reward calling it repeatedly pays once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from torch import nn

#: Config keys that describe the loading environment rather than the model.
#: ``architectures`` and ``dtype`` are filled in by ``save_pretrained``; the model class name and
#: every tensor's dtype are hashed directly instead, so a saved-and-reloaded model keeps its print.
_VOLATILE_CONFIG_KEYS = frozenset(
    {"_name_or_path", "transformers_version", "_commit_hash", "_attn_implementation_autoset", "name_or_path"}
    | {"architectures", "dtype", "torch_dtype"}
)
_MEMO_ATTR = "_propel_fingerprint_memo"


def config_fingerprint_payload(config: Any) -> bytes:
    """The config part of the fingerprint: sorted JSON of ``config.to_dict()`` (or a plain dict)."""
    raw = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    clean = {k: v for k, v in raw.items() if k not in _VOLATILE_CONFIG_KEYS}
    return json.dumps(clean, sort_keys=True, default=str).encode()


def state_dict_digest(state: dict[str, torch.Tensor], hasher: Any | None = None) -> Any:
    """Feed ``state`` into ``hasher`` (a new sha256 if None) in sorted key order and return it."""
    hasher = hasher if hasher is not None else hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach()
        header = f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{list(tensor.shape)}\n"
        hasher.update(header.encode())
        flat = tensor.to("cpu").contiguous().reshape(-1)
        if flat.numel():
            hasher.update(flat.view(torch.uint8).numpy().tobytes())
    return hasher


def _memo_key(model: nn.Module) -> tuple[int, ...]:
    return tuple(id(p) for p in model.parameters())


def model_fingerprint(model: nn.Module, use_memo: bool = True) -> str:
    """``sha256:<hex>`` over the model's config and state dict (see module docstring).

    With ``use_memo`` (default) the digest is cached on the model; pass ``False`` to re-hash the
    weights, e.g. to verify that a frozen reference really did not change.
    """
    key = _memo_key(model)
    memo = getattr(model, _MEMO_ATTR, None)
    if use_memo and memo is not None and memo[0] == key:
        return str(memo[1])
    hasher = hashlib.sha256(type(model).__name__.encode() + b"\0")
    config = getattr(model, "config", None)
    if config is not None:
        hasher.update(config_fingerprint_payload(config))
    state_dict_digest(model.state_dict(), hasher)
    digest = "sha256:" + hasher.hexdigest()
    object.__setattr__(model, _MEMO_ATTR, (key, digest))
    return digest
