"""The topic-share term of the generator's reward: a penalty on tasks of an over-represented topic (#34).

Left alone on its defaults, the daemon's generator put 0.96 of its valid tasks on one topic by cycle ~24
(``benchmarks/long_run.py``, run 4). The repetition penalty (:mod:`curriculum.reward.novelty`) looks at
n-grams; a policy that narrows to one operator signature (arith's ``mul:3``) with varied numbers slips
past it. :class:`TopicShareTerm` looks at the topic itself (``Domain.topic``, the label the top-topic
share metric counts):

* the **window** is a FIFO of the topics of the last ``window`` valid completions the reward has scored
  (GRPO rollouts and the daemon's cycle samples: the policy's recent output);
* a valid completion of topic ``t`` gets ``penalty = max(0, share(t) − target) / (1 − target)`` ∈ [0, 1],
  with ``share(t)`` the share of ``t`` in the window plus the current call's valid completions;
* the reward subtracts ``weight × penalty`` from that valid completion (as the repetition penalty does;
  the gate's valid minimum still holds, so a valid task never earns less than an invalid one).

A topic at or below ``target`` (default 0.15: arith's untrained generator's top topic holds ~0.11–0.20)
costs nothing. Limit: GRPO normalises rewards within each group of ``num_generations`` completions, so a
penalty the whole group shares moves nothing: the term steers a policy whose groups still mix topics, it
cannot pull back one that has already collapsed (measured: it delays the collapse). The daemon's
topic-share rollback (:mod:`daemon.loop.rollback`) is what restores a collapsed policy.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence


class TopicShareTerm:
    """Penalty ∈ [0, 1] on valid completions of topics above ``target`` share of the recent window."""

    def __init__(self, weight: float, target: float = 0.15, window: int = 512) -> None:
        if weight < 0 or not 0 < target < 1 or window < 0:
            raise ValueError(f"need weight ≥ 0, 0 < target < 1 and window ≥ 0 (got {weight}, {target}, {window})")
        self.weight, self.target, self.window = float(weight), float(target), int(window)
        self._recent: deque[str] = deque()
        self._counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._recent)

    def shares(self, topics: Sequence[str | None] = ()) -> dict[str, float]:
        """Each topic's share of the window plus ``topics`` (``None``: an invalid completion, ignored)."""
        pool = self._counts + Counter(t for t in topics if t is not None)
        total = sum(pool.values())
        return {t: n / total for t, n in pool.items()} if total else {}

    def penalties(self, topics: Sequence[str | None]) -> list[float]:
        """The penalty of each completion (0 for ``None``: invalid), then the valid topics join the window."""
        share = self.shares(topics)
        out = [0.0 if t is None else max(0.0, share[t] - self.target) / (1.0 - self.target) for t in topics]
        self.observe([t for t in topics if t is not None])
        return out

    def observe(self, topics: Sequence[str]) -> None:
        """Add valid completions' topics to the window, evicting the oldest beyond ``window``."""
        for t in topics:
            self._recent.append(t)
            self._counts[t] += 1
        while len(self._recent) > self.window:
            old = self._recent.popleft()
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
