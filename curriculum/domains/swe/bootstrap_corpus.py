"""The tiny SWE generator's pretraining corpus: bug spec lines of the configured repositories.

Lines are drawn uniformly over the repositories, then uniformly within each one's spec space
(:meth:`SweDomain.spec_corpus`), after the prompt :data:`TINY_PROMPT`. The corpus key hashes the
spec spaces, so a bootstrap cached for one set of repositories is not reused for another.
Validity = share of samples that parse into an applicable spec (no suite runs: the daemon verifies).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from curriculum.common.pretrain_corpus import Corpus
from curriculum.domains.swe.domain import TINY_PROMPT, SweDomain


def spec_line_corpus(options: dict[str, Any]) -> Corpus:
    """The spec-line :class:`~curriculum.common.pretrain_corpus.Corpus` of ``SweDomain(**options)`` (tiny prompts)."""
    domain = SweDomain(**{**options, "prompt_style": "tiny"})
    spaces = {name: sorted(s.render() for s in domain.spec_space(name)) for name in domain.usable_repos()}
    names = sorted(n for n, space in spaces.items() if space)
    if not names:
        raise ValueError(f"no fetched, preflighted SWE repository with mutable functions in split {domain.split!r}: "
                         "run `propel swe fetch` (docs/SWE.md) before bootstrapping the swe generator")
    digest = hashlib.sha256()
    for name in names:
        digest.update(("\n".join([name, *spaces[name]]) + "\n").encode())

    def draw(rng: random.Random, size: int) -> list[str]:
        return [rng.choice(spaces[rng.choice(names)]) for _ in range(size)]

    def validity(samples: list[str]) -> float:
        return sum(domain.parse(s).task is not None for s in samples) / max(1, len(samples))

    return Corpus(TINY_PROMPT, draw, validity, key=digest.hexdigest()[:16])
