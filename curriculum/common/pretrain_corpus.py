"""What a tiny generator is pretrained on (:func:`curriculum.rl.bootstrap.bootstrap`), one type for every
domain's recipe (kept apart so a domain's corpus module does not import the bootstrap)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Corpus:
    """``prompt`` + a drawn text + EOS per training sequence; ``validity`` scores sampled completions."""

    prompt: str
    draw: Callable[[random.Random, int], list[str]]
    validity: Callable[[list[str]], float]
    key: str = ""  # what the corpus is drawn from (part of the cache key; '' for the fixed arith recipe)
