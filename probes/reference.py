"""The frozen reference model the probes read: eval mode, no gradients, fingerprinted.

``FrozenReference`` owns a ``transformers`` causal LM and its tokenizer. It puts the model in
eval mode, turns off ``requires_grad`` on every parameter, runs forward passes under
``torch.inference_mode`` through the base model only (no LM head: the probes never need logits),
and remembers the fingerprint taken at load so :meth:`verify_unchanged` can prove that nothing
wrote to the weights. Pickling a reference loaded from a path or hub id stores only that source
and the fingerprint (an in-memory one stores class, config and weights); unpickling rebuilds the
model and refuses weights whose fingerprint differs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from probes.fingerprint import model_fingerprint

#: ``tokenizer_class`` of a tokenizer saved from a plain ``tokenizers`` pipeline (the project's char-level
#: tiny models): such a tokenizer is loaded as saved, not re-derived from the model type.
_PLAIN_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(path_or_id: str, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained``, except for a local directory whose tokenizer was saved from a plain
    ``tokenizers`` pipeline: that one is loaded with ``PreTrainedTokenizerFast``. (transformers 5 builds the
    model type's own tokenizer class for ``AutoTokenizer``: for a ``qwen2`` config the byte-level Qwen2
    pre-tokenizer, which silently drops every space the char-level vocabulary cannot map — ``"BUG: six "``
    was encoded as ``"BUG:six"``, unlike the pretraining sequences.)"""
    import json
    from pathlib import Path

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(path_or_id) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") in _PLAIN_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(path_or_id, **kwargs)
    return AutoTokenizer.from_pretrained(path_or_id, **kwargs)


class ReferenceChangedError(RuntimeError):
    """The reference weights differ from the ones fingerprinted at load."""


class FrozenReference:
    """A frozen causal LM + tokenizer; see the module docstring."""

    def __init__(
        self, model: nn.Module, tokenizer: Any, model_id: str | None = None, source: str | None = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.source = source
        self.model_id = (
            model_id or source or str(getattr(getattr(model, "config", None), "_name_or_path", "")) or "unnamed"
        )
        self._freeze()
        self.fingerprint = model_fingerprint(model, use_memo=False)

    @classmethod
    def load(cls, path_or_id: str, device: str = "cpu", dtype: torch.dtype | None = None) -> FrozenReference:
        """Load with ``AutoModelForCausalLM``/:func:`load_tokenizer` (a local directory works offline)."""
        from transformers import AutoModelForCausalLM

        tokenizer = load_tokenizer(path_or_id)
        kwargs: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
        model = AutoModelForCausalLM.from_pretrained(path_or_id, **kwargs)
        model = model.to(device)  # type: ignore[arg-type]
        return cls(model, tokenizer, model_id=path_or_id, source=path_or_id)

    def _freeze(self) -> None:
        self.model.eval()
        for param in self.model.parameters():
            param.requires_grad_(False)

    @property
    def _config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def hidden_size(self) -> int:
        return int(self._config.hidden_size)

    @property
    def num_layers(self) -> int:
        """Number of transformer blocks; valid layer indices are ``-num_layers-1 … num_layers``."""
        return int(self._config.num_hidden_layers)

    @property
    def pad_token_id(self) -> int:
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if candidate is not None:
                return int(candidate)
        return 0

    def resolve_layer(self, layer: int) -> int:
        """Map a possibly negative layer index to ``0 … num_layers`` or raise naming the range."""
        total = self.num_layers + 1
        if not -total <= layer < total:
            raise ValueError(
                f"layer {layer} out of range for a {self.num_layers}-layer model (use {-total}…{total - 1})"
            )
        return layer % total

    def hidden_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: set[int]
    ) -> dict[int, torch.Tensor]:
        """One forward pass of the base model; returns ``{resolved layer: (B, T, H)}``."""
        base = getattr(self.model, "base_model", self.model)
        with torch.inference_mode():
            out = base(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                output_hidden_states=True,
                use_cache=False,
            )
        states = out.hidden_states
        return {layer: states[layer] for layer in layers}

    def verify_unchanged(self) -> None:
        """Re-hash the weights; raise :class:`ReferenceChangedError` if they differ from load time."""
        now = model_fingerprint(self.model, use_memo=False)
        if now != self.fingerprint:
            raise ReferenceChangedError(f"reference {self.model_id} changed: {self.fingerprint} at load, {now} now")
        if any(p.requires_grad for p in self.model.parameters()):
            raise ReferenceChangedError(f"reference {self.model_id} has parameters with requires_grad=True")

    def __getstate__(self) -> dict[str, Any]:
        """Loaded from a path/hub id: pickle the source only. In memory: pickle class, config and weights."""
        state: dict[str, Any] = {"model_id": self.model_id, "fingerprint": self.fingerprint, "device": str(self.device)}
        if self.source is not None:
            return state | {"source": self.source}
        weights = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        return state | {
            "model_class": type(self.model),
            "config": self._config,
            "weights": weights,
            "tokenizer": self.tokenizer,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "source" in state:
            fresh = FrozenReference.load(state["source"], device=state["device"])
        else:
            model = state["model_class"](state["config"])
            model.load_state_dict(state["weights"])
            fresh = FrozenReference(model.to(state["device"]), state["tokenizer"], model_id=state["model_id"])
        if fresh.fingerprint != state["fingerprint"]:
            raise ReferenceChangedError(
                f"reference {state['model_id']} changed across pickling: {state['fingerprint']} → {fresh.fingerprint}"
            )
        self.__dict__.update(fresh.__dict__)
        self.model_id = state["model_id"]
