"""What the probes read: plain texts, multi-turn trajectories, and which features to take from them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from probes.pooling import pooled_dim, turn_pooled_dim, validate_pooling, validate_turn_pooling


@dataclass(frozen=True)
class FeatureSpec:
    """One feature vector: hidden states at ``layer``, pooled over tokens with ``pooling``.

    ``layer`` indexes ``output_hidden_states``: 0 is the embedding output, ``n_layers`` the last
    block (after the final norm); negative values count from the end (-1 = last). With
    ``turn_pooling`` set, ``pooling`` is applied within each assistant turn and the per-turn
    vectors are aggregated with ``turn_pooling`` (``probes.pooling.TURN_POOLINGS`` — mean, last,
    last_half, attention — or a token pooling; a plain text then counts as one turn).
    """

    layer: int
    pooling: str
    turn_pooling: str | None = None

    def __post_init__(self) -> None:
        validate_pooling(self.pooling)
        if self.turn_pooling is not None:
            object.__setattr__(self, "turn_pooling", validate_turn_pooling(self.turn_pooling))

    @property
    def name(self) -> str:
        base = f"L{self.layer}/{self.pooling}"
        return base if self.turn_pooling is None else f"{base}/turns:{self.turn_pooling}"

    def output_dim(self, hidden_size: int) -> int:
        """Width of this feature for a reference model of width ``hidden_size``."""
        dim = pooled_dim(hidden_size, self.pooling)
        return dim if self.turn_pooling is None else turn_pooled_dim(dim, self.turn_pooling)

    def to_dict(self) -> dict[str, object]:
        return {"layer": self.layer, "pooling": self.pooling, "turn_pooling": self.turn_pooling}

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> FeatureSpec:
        turn = raw.get("turn_pooling")
        return cls(
            layer=int(str(raw["layer"])), pooling=str(raw["pooling"]), turn_pooling=None if turn is None else str(turn)
        )


@dataclass(frozen=True)
class Trajectory:
    """A multi-turn (SWE-style) trajectory rendered as one text.

    ``turns`` are half-open character spans ``[start, end)`` of ``text`` covering the assistant
    turns; the extractor makes one vector per span from the tokens that overlap it (it needs a
    fast tokenizer, which reports character offsets). Build one with :meth:`from_messages`.
    """

    text: str
    turns: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError("a Trajectory needs at least one assistant turn span")
        for start, end in self.turns:
            if not 0 <= start < end <= len(self.text):
                raise ValueError(f"turn span ({start}, {end}) is empty or outside the text (length {len(self.text)})")

    @classmethod
    def from_messages(
        cls, messages: Iterable[Mapping[str, str]], assistant_role: str = "assistant", separator: str = "\n"
    ) -> Trajectory:
        """Join ``{"role", "content"}`` messages as ``"<role>: <content>"`` lines; spans cover assistant content."""
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        cursor = 0
        for message in messages:
            prefix = f"{message['role']}: "
            content = message["content"]
            if message["role"] == assistant_role and content:
                spans.append((cursor + len(prefix), cursor + len(prefix) + len(content)))
            piece = prefix + content + separator
            parts.append(piece)
            cursor += len(piece)
        return cls(text="".join(parts), turns=tuple(spans))


TextInput = str | Trajectory


def text_of(item: TextInput) -> str:
    return item.text if isinstance(item, Trajectory) else item


def input_hash(item: TextInput) -> str:
    """Stable content hash of a text or trajectory (spans included)."""
    hasher = hashlib.sha256()
    if isinstance(item, Trajectory):
        hasher.update(b"trajectory\0" + json.dumps(item.turns).encode() + b"\0")
    hasher.update(text_of(item).encode())
    return hasher.hexdigest()
