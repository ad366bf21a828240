"""The diversity term of the generator's reward: a repetition penalty on canonical n-gram overlap.

Issue #22: co-evolution keeps the frontier lift but narrows the task distribution (Self-BLEU-3 up,
Distinct-3 down); diversity was only monitored. :class:`DiversityTerm` makes the reward pay for it:
``reward = probe reward − weight × penalty`` on valid completions (:mod:`curriculum.reward.rewards`).

**Canonical forms** (:func:`canonical_form`) — surface noise must earn no novelty, so every
comparison is made on a per-domain canonical form, then tokenised with the pinned tokenizer of the
collapse metrics (:func:`curriculum.reward.diversity.tokenize`) and re-joined with single spaces:

* every domain: whitespace never matters (it only separates tokens);
* ``azr`` (Python code induction): only the fenced blocks the domain reads count (text outside
  them is ignored by validation, so it is ignored here); the ``python`` block is parsed with
  :mod:`ast`, every identifier that is not a builtin, a keyword, an attribute name or an imported
  name is renamed ``v0, v1, …`` in order of first appearance in the source, and the tree is
  unparsed (comments, quoting, parentheses and layout normalised by :func:`ast.unparse`); the
  ``input`` and ``message`` blocks keep their text; the blocks are joined without their fences
  (fence tokens would be n-grams every task shares). A program that does not parse falls back to
  the whitespace form;
* ``arith``: whitespace removed, the ``Q:`` prompt prefix dropped and the expression rewritten by the
  domain's own parser (:func:`curriculum.domains.arith.analyse`, the form valid tasks are stored
  in); unparsable text falls back to the whitespace form;
* ``math``: lower-cased; the tokens ``$`` and ``~``, LaTeX spacing commands (``\\, \\; \\: \\!
  \\quad \\qquad``) and ``\\left``/``\\right`` dropped; ``\\dfrac``/``\\tfrac`` written ``\\frac``;
* any other domain: the whitespace form.

**Penalty** (:meth:`DiversityTerm.penalties`), computed on the sets of distinct hashed n-grams
(``n = 3`` by default; the same token windows as Distinct-n, a text shorter than ``n`` is one gram)
with the Jaccard similarity ``J(a, b) = |A ∩ B| / |A ∪ B|``:

* group term ``g_i`` = mean ``J(i, j)`` over the other *valid* members ``j`` of ``i``'s GRPO group
  (consecutive blocks of ``group_size`` completions, as TRL lays them out) — the soft version of
  R-Zero's repetition penalty (Huang et al. 2025, "R-Zero: Self-Evolving Reasoning LLM from Zero
  Data", arXiv:2508.05004, §3.2: pairwise BLEU distance, agglomerative clustering, penalty
  ``|C_k| / B`` for the size of the task's cluster). Averaging the similarity instead of counting
  a thresholded cluster gives the same "share of my group that repeats me" without a clustering
  threshold, and without ties that flip at it;
* archive term ``a_i`` = max ``J(i, k)`` over a rolling archive of recently *emitted* tasks —
  nearest-neighbour novelty against an archive as in novelty search (Lehman & Stanley 2011,
  "Abandoning Objectives"), with n-gram-set Jaccard as the near-duplicate measure used for
  deduplicating LM training data (Broder 1997; Lee et al. 2022, "Deduplicating Training Data Makes
  Language Models Better"). The maximum, not the mean: sharing the domain's common vocabulary with
  many archived tasks is not repetition, being a near-copy of one of them is;
* ``penalty_i = 1 − (1 − g_i)(1 − a_i)`` ∈ [0, 1]: 0 for a task unlike its group and the archive,
  1 for an exact (canonical) duplicate of either.

Why not BLEU clusters or embeddings: pairwise BLEU is O(B²·L) Python work per call plus a threshold
choice; an embedding distance needs a model forward pass, i.e. roughly the cost of the probe
itself (``benchmarks/diversity_cost.py`` measures this term against the probe pass). Hashed
n-gram sets cost one tokenisation per completion and a sorted-array join against the archive.

**Measure ``self_bleu``** (``measure="self_bleu"``, issue #22 follow-up): the measure above is
blind to what the collapse metrics see on arith. Two different short expressions share almost no
3-gram, so the mean pairwise Jaccard is ≈ 0 for every member of a varied-looking group and nearly
constant across it, and GRPO's per-group advantage normalisation removes a constant. Self-BLEU-3
(Zhu et al. 2018, "Texygen", the metric :mod:`curriculum.reward.diversity` pins) instead asks, per text, how
much of it — 1-, 2- and 3-grams, geometric mean — is *covered by the union* of the other texts: a
policy that concentrates on favourite numbers and operator patterns raises it without producing
near-copies. ``self_bleu`` is that per-text score as the penalty, on canonical forms: for orders
``n = 1..order`` (``order = 3`` by default), ``p_n`` = share of the text's distinct n-grams found in
the pool — the other valid completions of the same reward call, the archive of emitted tasks, and a
FIFO window of the last ``rollout_window`` valid completions the term has scored (the policy's
recent output: the eval sample the metric is computed on is drawn from that policy) — with nltk's
``method1`` smoothing (a zero count becomes 0.1), and ``penalty = (∏ p_n)^(1/orders)`` ∈ (0, 1] over
the orders the text is long enough for (0 for an empty text). Presence in the pool, not clipped
counts: a canonical arith expression rarely repeats an n-gram within itself. The pool's n-gram
counts are kept incrementally, so a call costs a few dict look-ups per gram.

**Archive** (:meth:`DiversityTerm.observe`): the emitted tasks' n-gram sets, oldest first, at most
``archive_size``; no topic may hold more than ``topic_quota × archive_size`` of them (at least 1):
a task of a topic at its quota evicts that topic's oldest entry, otherwise a full archive evicts
its oldest entry. A task whose canonical form is already archived is not added twice.

Everything is deterministic: token hashes are CRC-32 (not Python's salted ``hash``), n-gram hashes
a fixed polynomial over them in uint64 arithmetic.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import zlib
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from curriculum.reward.diversity import SMOOTHING_EPSILON, tokenize

_BUILTINS = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_MATH_COMMANDS_DROPPED = frozenset({"left", "right", ",", ";", ":", "!", "quad", "qquad"})
_HASH_BASE = np.uint64(1_000_003)
#: the penalty's measures (module docstring): the original set Jaccard, and per-text Self-BLEU against a pool
MEASURES = ("jaccard", "self_bleu")
_SHORT_SALT = np.uint64(0x9E3779B97F4A7C15)


def whitespace_form(text: str) -> str:
    """The tokens of :func:`curriculum.reward.diversity.tokenize` joined by single spaces."""
    return " ".join(tokenize(text))


def _rename_identifiers(code: str) -> str:
    """``code`` unparsed with its non-builtin, non-imported identifiers renamed v0, v1, … (source order)."""
    tree = ast.parse(code)
    nodes = list(ast.walk(tree))
    imported = {(a.asname or a.name).split(".")[0] for node in nodes
                if isinstance(node, ast.Import | ast.ImportFrom) for a in node.names}
    keep = _BUILTINS | imported
    found: list[tuple[int, int, str]] = []
    for node in nodes:
        if isinstance(node, ast.Name):
            found.append((node.lineno, node.col_offset, node.id))
        elif isinstance(node, ast.arg):
            found.append((node.lineno, node.col_offset, node.arg))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append((node.lineno, node.col_offset, node.name))
    mapping: dict[str, str] = {}
    for _, _, name in sorted(found):
        if name not in keep and name not in mapping:
            mapping[name] = f"v{len(mapping)}"
    for node in nodes:
        if isinstance(node, ast.Name):
            node.id = mapping.get(node.id, node.id)
        elif isinstance(node, ast.arg):
            node.arg = mapping.get(node.arg, node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            node.name = mapping.get(node.name, node.name)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            node.arg = mapping.get(node.arg, node.arg)
    return ast.unparse(tree)


def _azr_form(text: str) -> str:
    from curriculum.domains.azr import ParsedBlocks, extract_blocks

    blocks = extract_blocks(text)
    if not isinstance(blocks, ParsedBlocks):
        return whitespace_form(text)
    try:
        code = _rename_identifiers(blocks.code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return whitespace_form(text)
    return whitespace_form("\n".join([code, *blocks.inputs, blocks.message]))


def _arith_form(text: str) -> str:
    from curriculum.domains.arith import ArithError, _strip_prompt, analyse

    try:  # tokens re-joined without spaces first: "Q : 1 2 + 3" is read as "Q:12+3"
        return whitespace_form(analyse(_strip_prompt("".join(tokenize(text)))).canonical)
    except ArithError:
        return whitespace_form(text)


def _math_form(text: str) -> str:
    tokens, out = tokenize(text.lower()), []
    i = 0
    while i < len(tokens):
        tok, nxt = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok == "\\" and nxt in _MATH_COMMANDS_DROPPED:
            i += 2
            continue
        if tok == "\\" and nxt in ("dfrac", "tfrac"):
            out += ["\\", "frac"]
            i += 2
            continue
        if tok not in ("$", "~"):
            out.append(tok)
        i += 1
    return " ".join(out)


def canonical_form(domain_name: str, text: str) -> str:
    """The per-domain canonical form of a task text (definitions in the module docstring)."""
    if domain_name == "azr":
        return _azr_form(text)
    if domain_name == "arith":
        return _arith_form(text)
    if domain_name == "math":
        return _math_form(text)
    return whitespace_form(text)


def _token_hash(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) + 1  # never 0


def hashed_ngrams(tokens: Sequence[str], n: int) -> NDArray[np.uint64]:
    """Sorted distinct 64-bit hashes of the ``n``-token windows of ``tokens`` (one gram when shorter)."""
    h = np.fromiter((_token_hash(t) for t in tokens), dtype=np.uint64, count=len(tokens))
    if len(tokens) < n:
        short = np.asarray([_SHORT_SALT + np.uint64(len(tokens))], dtype=np.uint64)
        for k in range(len(tokens)):
            short = short * _HASH_BASE + h[k:k + 1]
        return short
    width = len(tokens) - n + 1
    acc = np.zeros(width, dtype=np.uint64)
    for k in range(n):
        acc = acc * _HASH_BASE + h[k:k + width]
    return np.unique(acc)


def ngram_orders(tokens: Sequence[str], order: int) -> tuple[NDArray[np.uint64], ...]:
    """The distinct hashed n-grams of ``tokens`` for ``n = 1..order`` (an empty set where the text is shorter)."""
    return tuple(hashed_ngrams(tokens, n) if len(tokens) >= n else np.zeros(0, dtype=np.uint64)
                 for n in range(1, order + 1))


class _GramPool:
    """How many pooled texts hold each hashed n-gram, per order (a gram is in the pool when its count > 0)."""

    def __init__(self, order: int) -> None:
        self.counts: list[Counter[int]] = [Counter() for _ in range(order)]

    def add(self, grams: Sequence[NDArray[np.uint64]], sign: int = 1) -> None:
        for counts, g in zip(self.counts, grams, strict=True):
            for h in g.tolist():
                counts[h] += sign
                if counts[h] <= 0:
                    del counts[h]

    def holds(self, n: int, gram: int) -> bool:
        return self.counts[n].get(gram, 0) > 0


def _smoothed_bleu(grams: Sequence[NDArray[np.uint64]], found: Sequence[int]) -> float:
    """Geometric mean over the non-empty orders of ``found / size`` (a zero count becomes 0.1, nltk method1)."""
    logs = [np.log((k if k else SMOOTHING_EPSILON) / len(g)) for g, k in zip(grams, found, strict=True) if len(g)]
    return float(np.exp(np.mean(logs))) if logs else 0.0


@dataclass(frozen=True, eq=False)  # identity equality: entries are removed by identity
class _Entry:
    key: str  # canonical form
    topic: str
    grams: NDArray[np.uint64]
    orders: tuple[NDArray[np.uint64], ...] = ()  # measure "self_bleu": the 1..order-gram sets


class _GramIndex:
    """Intersection sizes of query gram sets with a fixed list of reference gram sets."""

    def __init__(self, sets: Sequence[NDArray[np.uint64]]) -> None:
        self.sizes = np.asarray([len(s) for s in sets], dtype=np.int64)
        flat = np.concatenate(list(sets)) if sets else np.zeros(0, dtype=np.uint64)
        owner = np.repeat(np.arange(len(sets), dtype=np.int64), self.sizes)
        order = np.argsort(flat, kind="stable")
        self.hashes, self.owner = flat[order], owner[order]

    def intersections(self, queries: Sequence[NDArray[np.uint64]]) -> NDArray[np.int64]:
        """``out[q, r] = |queries[q] ∩ sets[r]|``.

        The distinct query grams are looked up once (a gram every archived task shares would
        otherwise be expanded once per query holding it), their reference incidence is a dense
        0/1 matrix, and the counts are one product of it with the queries' incidence."""
        n_ref = len(self.sizes)
        if not queries or n_ref == 0:
            return np.zeros((len(queries), n_ref), dtype=np.int64)
        grams, inverse = np.unique(np.concatenate(list(queries)), return_inverse=True)
        left = np.searchsorted(self.hashes, grams, side="left")
        hits = np.searchsorted(self.hashes, grams, side="right") - left
        found = np.flatnonzero(hits)
        if len(found) == 0:
            return np.zeros((len(queries), n_ref), dtype=np.int64)
        column = np.full(len(grams), -1, dtype=np.int64)
        column[found] = np.arange(len(found))
        total = int(hits.sum())
        rank = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(hits[found]) - hits[found], hits[found])
        ref_incidence = np.zeros((len(found), n_ref), dtype=np.float32)
        ref_incidence[np.repeat(np.arange(len(found)), hits[found]), self.owner[np.repeat(left[found], hits[found])
                                                                                 + rank]] = 1.0
        q_owner = np.repeat(np.arange(len(queries), dtype=np.int64), [len(q) for q in queries])
        keep = column[inverse.reshape(-1)] >= 0
        q_incidence = np.zeros((len(queries), len(found)), dtype=np.float32)
        q_incidence[q_owner[keep], column[inverse.reshape(-1)][keep]] = 1.0
        return np.rint(q_incidence @ ref_incidence).astype(np.int64)  # exact: counts far below 2**24

    def jaccard(self, queries: Sequence[NDArray[np.uint64]]) -> NDArray[np.float64]:
        inter = self.intersections(queries).astype(np.float64)
        q_sizes = np.asarray([len(q) for q in queries], dtype=np.float64)[:, None]
        union = q_sizes + self.sizes[None, :].astype(np.float64) - inter
        return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


class DiversityTerm:
    """Repetition penalty of a batch against its GRPO groups and a topic-quota'd archive (module docstring)."""

    def __init__(self, domain: str, weight: float, archive_size: int = 1024, n: int = 3,
                 topic_quota: float = 0.25, measure: str = "jaccard", rollout_window: int = 512) -> None:
        if not weight >= 0:
            raise ValueError(f"diversity weight must be ≥ 0, got {weight}")
        if archive_size < 1 or n < 1 or rollout_window < 0:
            raise ValueError(f"archive_size and n must be ≥ 1, rollout_window ≥ 0 (got {archive_size}, {n}, "
                             f"{rollout_window})")
        if not 0 < topic_quota <= 1:
            raise ValueError(f"topic_quota must lie in (0, 1], got {topic_quota}")
        if measure not in MEASURES:
            raise ValueError(f"unknown diversity measure {measure!r}: choose one of {', '.join(MEASURES)}")
        self.domain, self.weight, self.n, self.measure = domain, float(weight), n, measure
        self.rollout_window = rollout_window
        self._rollouts: deque[tuple[NDArray[np.uint64], ...]] = deque()
        self._rollout_pool = _GramPool(n)
        self._archive_pool: _GramPool | None = None
        self.archive_size, self.topic_quota = archive_size, float(topic_quota)
        self.per_topic = max(1, int(topic_quota * archive_size))
        self._archive: deque[_Entry] = deque()
        self._keys: set[str] = set()  # canonical forms archived
        self._topics: Counter[str] = Counter()
        self._index: _GramIndex | None = None

    def __len__(self) -> int:
        return len(self._archive)

    def topic_counts(self) -> dict[str, int]:
        """Archived tasks per topic."""
        return dict(self._topics)

    def grams(self, text: str) -> tuple[str, NDArray[np.uint64]]:
        """The canonical form of ``text`` and its hashed n-gram set."""
        key = canonical_form(self.domain, text)
        return key, hashed_ngrams(key.split(" ") if key else [], self.n)

    def penalties(self, texts: Sequence[str | None], group_size: int) -> list[float]:
        """Penalty in [0, 1] per text; ``None`` (an invalid completion) gets 0 and is nobody's group mate.

        Groups are consecutive blocks of ``group_size`` texts (the last one may be shorter)."""
        if group_size < 1:
            raise ValueError(f"group_size must be ≥ 1, got {group_size}")
        if self.measure == "self_bleu":
            return self._bleu_penalties(texts)
        idx = [i for i, t in enumerate(texts) if t is not None]
        out = [0.0] * len(texts)
        if not idx:
            return out
        sets = [self.grams(str(texts[i]))[1] for i in idx]
        pair = _GramIndex(sets).jaccard(sets)
        group = np.asarray(idx, dtype=np.int64) // group_size
        mates = (group[:, None] == group[None, :]) & ~np.eye(len(idx), dtype=bool)
        n_mates = mates.sum(axis=1)
        g = np.divide((pair * mates).sum(axis=1), n_mates, out=np.zeros(len(idx)), where=n_mates > 0)
        a = self._archive_index().jaccard(sets).max(axis=1) if self._archive else np.zeros(len(idx))
        p = np.clip(1.0 - (1.0 - g) * (1.0 - a), 0.0, 1.0)
        for i, value in zip(idx, p.tolist(), strict=True):
            out[i] = float(value)
        return out

    def observe(self, texts: Sequence[str], topics: Sequence[str | None]) -> int:
        """Archive emitted tasks (per-topic quota, oldest evicted first); returns how many were added."""
        if len(texts) != len(topics):
            raise ValueError(f"{len(texts)} texts but {len(topics)} topics")
        added = 0
        for text, topic in zip(texts, topics, strict=True):
            key, grams = self.grams(text)
            if key in self._keys:
                continue
            orders = self._orders(key) if self.measure == "self_bleu" else ()
            entry = _Entry(key, topic or "", grams, orders)
            if self._topics[entry.topic] >= self.per_topic:
                self._evict(next(e for e in self._archive if e.topic == entry.topic))
            elif len(self._archive) >= self.archive_size:
                self._evict(self._archive[0])
            self._archive.append(entry)
            self._keys.add(key)
            self._topics[entry.topic] += 1
            added += 1
        if added:
            self._index, self._archive_pool = None, None
        return added

    def _evict(self, entry: _Entry) -> None:
        self._archive.remove(entry)
        self._keys.discard(entry.key)
        self._topics[entry.topic] -= 1
        if not self._topics[entry.topic]:
            del self._topics[entry.topic]

    def _archive_index(self) -> _GramIndex:
        if self._index is None:
            self._index = _GramIndex([e.grams for e in self._archive])
        return self._index

    def _orders(self, key: str) -> tuple[NDArray[np.uint64], ...]:
        """The 1..n-gram sets of a canonical form (its tokens are space-joined)."""
        return ngram_orders(key.split(" ") if key else [], self.n)

    def _bleu_penalties(self, texts: Sequence[str | None]) -> list[float]:
        """Measure ``self_bleu``: each valid text's smoothed BLEU precision against the other valid texts of
        the call, the archive and the rollout window; the valid texts then join the window."""
        idx = [i for i, t in enumerate(texts) if t is not None]
        out = [0.0] * len(texts)
        sets = [self._orders(canonical_form(self.domain, str(texts[i]))) for i in idx]
        call = _GramPool(self.n)
        for grams in sets:
            call.add(grams)
        pools = (self._archive_gram_pool(), self._rollout_pool)
        for i, grams in zip(idx, sets, strict=True):
            found = [sum(1 for h in g.tolist() if call.counts[n][h] > 1 or any(p.holds(n, h) for p in pools))
                     for n, g in enumerate(grams)]
            out[i] = _smoothed_bleu(grams, found)
        for grams in sets if self.rollout_window else ():
            if len(self._rollouts) >= self.rollout_window:
                self._rollout_pool.add(self._rollouts.popleft(), sign=-1)
            self._rollouts.append(grams)
            self._rollout_pool.add(grams)
        return out

    def _archive_gram_pool(self) -> _GramPool:
        if self._archive_pool is None:
            self._archive_pool = _GramPool(self.n)
            for e in self._archive:
                self._archive_pool.add(e.orders)
        return self._archive_pool
