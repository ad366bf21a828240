"""Extract once, serve many heads: pooled feature vectors for a batch of texts.

:class:`FeatureExtractor` tokenises, sorts by length (less padding), truncates and pads itself
(so padding side and truncation side are explicit), runs **one** forward pass of the frozen
reference per batch, and computes every requested :class:`~probes.inputs.FeatureSpec` from the
same hidden states. With a :class:`~probes.cache.FeatureCache`, an input whose features are all
cached costs no forward pass at all; ``forward_passes`` counts the passes actually run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch

from probes.cache import CacheKey, FeatureCache
from probes.inputs import FeatureSpec, TextInput, Trajectory, input_hash, text_of
from probes.pooling import pool, pool_sequence
from probes.reference import FrozenReference

ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class ExtractionConfig:
    """How texts become model inputs. ``truncation_side='left'`` keeps the end of long texts."""

    batch_size: int = 16
    max_length: int = 2048
    truncation_side: Literal["left", "right"] = "left"
    padding_side: Literal["left", "right"] = "left"
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_length < 1:
            raise ValueError(f"batch_size and max_length must be ≥ 1 (got {self.batch_size}, {self.max_length})")

    @property
    def tag(self) -> str:
        """Cache-key part: the settings that change what the model reads (not batch size/padding)."""
        return json.dumps(
            {k: v for k, v in asdict(self).items() if k in ("max_length", "truncation_side", "add_special_tokens")},
            sort_keys=True,
        )


@dataclass
class _Encoded:
    ids: list[int]
    offsets: list[tuple[int, int]] | None


class FeatureExtractor:
    """Pooled features from a :class:`FrozenReference`; see the module docstring."""

    def __init__(
        self, reference: FrozenReference, config: ExtractionConfig | None = None, cache: FeatureCache | None = None
    ) -> None:
        self.reference = reference
        self.config = config or ExtractionConfig()
        self.cache = cache
        self.forward_passes = 0

    def _cache_key(self, spec: FeatureSpec, text_hash: str) -> CacheKey:
        layer = self.reference.resolve_layer(spec.layer)
        return CacheKey(self.reference.fingerprint, self.config.tag, layer, spec.pooling, spec.turn_pooling, text_hash)

    def extract(
        self, items: Sequence[TextInput], specs: Sequence[FeatureSpec], progress: ProgressFn | None = None
    ) -> dict[FeatureSpec, np.ndarray]:
        """``{spec: float32 array (len(items), spec.output_dim(H))}``, rows in input order."""
        specs = list(dict.fromkeys(specs))
        if not specs:
            raise ValueError("extract needs at least one FeatureSpec")
        for spec in specs:
            self.reference.resolve_layer(spec.layer)
            if spec.turn_pooling is None and any(isinstance(item, Trajectory) for item in items):
                raise ValueError(f"feature {spec.name} has no turn_pooling but the inputs contain trajectories")
        hidden = self.reference.hidden_size
        out = {spec: np.zeros((len(items), spec.output_dim(hidden)), dtype=np.float32) for spec in specs}
        todo = self._fill_from_cache(items, specs, out)
        if progress is not None and len(items) - len(todo):
            progress(len(items) - len(todo))
        if todo:
            self._compute(items, todo, specs, out, progress)
        return out

    def _fill_from_cache(
        self, items: Sequence[TextInput], specs: list[FeatureSpec], out: dict[FeatureSpec, np.ndarray]
    ) -> list[int]:
        if self.cache is None:
            return list(range(len(items)))
        todo: list[int] = []
        for row, item in enumerate(items):
            text_hash = input_hash(item)
            vectors = [self.cache.get(self._cache_key(spec, text_hash)) for spec in specs]
            if any(vec is None for vec in vectors):
                todo.append(row)
                continue
            for spec, vec in zip(specs, vectors, strict=True):
                out[spec][row] = vec
        return todo

    def _encode(self, items: Sequence[TextInput], rows: list[int]) -> dict[int, _Encoded]:
        need_offsets = any(isinstance(items[r], Trajectory) for r in rows)
        texts = [text_of(items[r]) for r in rows]
        kwargs = {"add_special_tokens": self.config.add_special_tokens}
        if need_offsets:
            kwargs["return_offsets_mapping"] = True
        encoded = self.reference.tokenizer(texts, **kwargs)
        limit, keep_end = self.config.max_length, self.config.truncation_side == "left"
        result: dict[int, _Encoded] = {}
        for i, row in enumerate(rows):
            ids = list(encoded["input_ids"][i])
            offsets = [(int(o[0]), int(o[1])) for o in encoded["offset_mapping"][i]] if need_offsets else None
            if not ids:
                raise ValueError(f"input {row} tokenises to zero tokens (empty text?)")
            if len(ids) > limit:
                ids = ids[-limit:] if keep_end else ids[:limit]
                if offsets is not None:
                    offsets = offsets[-limit:] if keep_end else offsets[:limit]
            result[row] = _Encoded(ids, offsets)
        return result

    def _pad(self, encoded: list[_Encoded]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(e.ids) for e in encoded)
        ids = torch.full((len(encoded), width), self.reference.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, enc in enumerate(encoded):
            n = len(enc.ids)
            cols = slice(width - n, width) if self.config.padding_side == "left" else slice(0, n)
            ids[i, cols] = torch.tensor(enc.ids, dtype=torch.long)
            mask[i, cols] = 1
        return ids, mask

    def _compute(
        self,
        items: Sequence[TextInput],
        rows: list[int],
        specs: list[FeatureSpec],
        out: dict[FeatureSpec, np.ndarray],
        progress: ProgressFn | None,
    ) -> None:
        encoded = self._encode(items, rows)
        order = sorted(rows, key=lambda r: len(encoded[r].ids))
        layers = {self.reference.resolve_layer(spec.layer) for spec in specs}
        for start in range(0, len(order), self.config.batch_size):
            batch = order[start : start + self.config.batch_size]
            ids, mask = self._pad([encoded[r] for r in batch])
            states = self.reference.hidden_states(ids, mask, layers)
            self.forward_passes += 1
            for spec in specs:
                hidden = states[self.reference.resolve_layer(spec.layer)]
                vectors = self._pool_batch(items, batch, encoded, spec, hidden, mask.to(hidden.device))
                out[spec][batch] = vectors
                if self.cache is not None:
                    for r, vec in zip(batch, vectors, strict=True):
                        self.cache.put(self._cache_key(spec, input_hash(items[r])), vec)
            if progress is not None:
                progress(len(batch))

    def _pool_batch(
        self,
        items: Sequence[TextInput],
        batch: list[int],
        encoded: dict[int, _Encoded],
        spec: FeatureSpec,
        hidden: torch.Tensor,
        mask: torch.Tensor,
    ) -> np.ndarray:
        if spec.turn_pooling is None:
            return pool(hidden, mask, spec.pooling).cpu().numpy()
        rows = []
        for i, r in enumerate(batch):
            turn_masks = self._turn_masks(items[r], encoded[r], mask[i], r)
            per_turn = pool(hidden[i].unsqueeze(0).expand(len(turn_masks), -1, -1), turn_masks, spec.pooling)
            rows.append(pool_sequence(per_turn, spec.turn_pooling).cpu().numpy())
        return np.stack(rows)

    def _turn_masks(self, item: TextInput, enc: _Encoded, row_mask: torch.Tensor, row: int) -> torch.Tensor:
        """``(n_turns, T)`` masks selecting each assistant turn's tokens within the padded row."""
        if not isinstance(item, Trajectory):
            return row_mask.unsqueeze(0)
        assert enc.offsets is not None
        width, n = row_mask.shape[0], len(enc.ids)
        shift = width - n if self.config.padding_side == "left" else 0
        masks = []
        for start, end in item.turns:
            cols = [shift + t for t, (a, b) in enumerate(enc.offsets) if b > a and a < end and b > start]
            if cols:
                m = torch.zeros(width, dtype=row_mask.dtype, device=row_mask.device)
                m[cols] = 1
                masks.append(m)
        if not masks:
            raise ValueError(
                f"trajectory {row}: no assistant turn survives truncation to max_length={self.config.max_length} "
                f"({self.config.truncation_side} side); raise max_length"
            )
        return torch.stack(masks)
