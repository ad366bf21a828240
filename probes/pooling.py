"""Pooling rules: a padded batch of hidden states → one vector per row.

Every rule takes ``hidden`` of shape ``(B, T, H)`` and a 0/1 ``mask`` of shape ``(B, T)`` and
returns ``(B, D)``. Only positions where ``mask`` is 1 take part, so left padding, right padding
and even holes in the mask (a turn inside a longer trajectory) give the same result. Positions
are ranked among the *valid* tokens of each row, never by absolute index.

Names (paper, Appendix 14):

=====================  ======  ===========================================================
name                   D       definition over the valid tokens ``v_1 … v_n`` of a row
=====================  ======  ===========================================================
``last_token``         H       ``v_n``
``mean_full``          H       mean of ``v_1 … v_n``
``mean_last_{k}``      H       mean of the last ``min(k, n)`` tokens (k = 50, 5, 3 built in;
                               any positive integer is accepted)
``mean_last_half``     H       mean of the last ``ceil(n / 2)`` tokens
``max``                H       element-wise maximum
``first_last_concat``  2H      ``[v_1, v_n]``
``mean_std_concat``    2H      ``[mean, std]`` with the population std (divide by ``n``)
=====================  ======  ===========================================================

A row with no valid token is an error (``ValueError``), never a silent zero vector.

Turn poolings (:data:`TURN_POOLINGS`, ``FeatureSpec.turn_pooling``) aggregate the per-turn vectors
``t_1 … t_m`` of a multi-turn trajectory (one per generated agent turn) into one vector:
``mean`` (= ``mean_full``), ``last`` (= ``last_token``: the final turn), ``last_half`` (=
``mean_last_half``: the later ``ceil(m / 2)`` turns) and ``attention``: parameter-free dot-product
attention with the last turn as the query, ``sum_i w_i t_i`` with
``w = softmax(cos(t_i, t_m) / ATTENTION_TEMPERATURE)`` (turns that look like the final one weigh more;
no trained weights, so the feature stays a pure function of the reference). Every token pooling
name is accepted as a turn pooling too.
"""

from __future__ import annotations

import re

import torch

#: The poolings of the paper's sweep grid, in display order.
POOLINGS: tuple[str, ...] = (
    "last_token",
    "mean_full",
    "mean_last_50",
    "mean_last_5",
    "mean_last_3",
    "mean_last_half",
    "max",
    "first_last_concat",
    "mean_std_concat",
)
#: Turn poolings for trajectories (module docstring); ``last-half`` is accepted for ``last_half``.
TURN_POOLINGS: tuple[str, ...] = ("mean", "last", "last_half", "attention")
_TURN_ALIASES = {"mean": "mean_full", "last": "last_token", "last_half": "mean_last_half"}
#: Softmax temperature of the ``attention`` turn pooling (over cosine similarities in [-1, 1]).
ATTENTION_TEMPERATURE = 0.1
_MEAN_LAST = re.compile(r"^mean_last_([1-9][0-9]*)$")
_DOUBLE_WIDTH = frozenset({"first_last_concat", "mean_std_concat"})


def validate_pooling(name: str) -> str:
    """Return ``name`` if it is a known pooling, else raise ``ValueError`` listing the choices."""
    if name in POOLINGS or _MEAN_LAST.match(name):
        return name
    raise ValueError(f"unknown pooling {name!r}; choose one of {', '.join(POOLINGS)} or mean_last_<k>")


def pooled_dim(hidden_size: int, pooling: str) -> int:
    """Width of the vector ``pooling`` produces from hidden states of width ``hidden_size``."""
    validate_pooling(pooling)
    return 2 * hidden_size if pooling in _DOUBLE_WIDTH else hidden_size


def _ranks(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(valid bool mask, 0-based rank of each valid position in its row, valid count per row)."""
    valid = mask.bool()
    counts = valid.sum(dim=1)
    if bool((counts == 0).any()):
        empty = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"pooling over rows with no valid token (rows {empty}); check the attention mask")
    rank = torch.cumsum(valid.long(), dim=1) - 1
    return valid, rank, counts


def _masked_mean(hidden: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    weights = select.to(hidden.dtype).unsqueeze(-1)
    total = (hidden * weights).sum(dim=1)
    return total / weights.sum(dim=1).clamp_min(1.0)


def _pick(hidden: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """The single selected position per row (``select`` has exactly one True per row)."""
    index = select.long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]


def _mean_last(hidden: torch.Tensor, valid: torch.Tensor, rank: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    counts = valid.sum(dim=1, keepdim=True)
    select = valid & (rank >= counts - keep.unsqueeze(1))
    return _masked_mean(hidden, select)


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Apply ``pooling`` to ``hidden`` ``(B, T, H)`` under ``mask`` ``(B, T)``; returns ``(B, D)``.

    Computation happens in float32 whatever the model dtype, so bf16 references pool stably.
    """
    validate_pooling(pooling)
    if hidden.dim() != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(f"expected hidden (B, T, H) and mask (B, T); got {tuple(hidden.shape)}, {tuple(mask.shape)}")
    hidden = hidden.float()
    valid, rank, counts = _ranks(mask)
    if pooling == "mean_full":
        return _masked_mean(hidden, valid)
    if pooling == "last_token":
        return _pick(hidden, valid & (rank == (counts - 1).unsqueeze(1)))
    if pooling == "mean_last_half":
        return _mean_last(hidden, valid, rank, torch.div(counts + 1, 2, rounding_mode="floor"))
    matched = _MEAN_LAST.match(pooling)
    if matched:
        return _mean_last(hidden, valid, rank, torch.clamp(counts, max=int(matched.group(1))))
    if pooling == "max":
        filled = hidden.masked_fill(~valid.unsqueeze(-1), float("-inf"))
        return filled.max(dim=1).values
    if pooling == "first_last_concat":
        first = _pick(hidden, valid & (rank == 0))
        last = _pick(hidden, valid & (rank == (counts - 1).unsqueeze(1)))
        return torch.cat([first, last], dim=-1)
    # mean_std_concat
    mean = _masked_mean(hidden, valid)
    centred = (hidden - mean.unsqueeze(1)) * valid.unsqueeze(-1).to(hidden.dtype)
    var = (centred**2).sum(dim=1) / counts.unsqueeze(1).to(hidden.dtype)
    return torch.cat([mean, var.sqrt()], dim=-1)


def validate_turn_pooling(name: str) -> str:
    """``name`` in canonical form (``last-half`` → ``last_half``) if it is a turn pooling
    (:data:`TURN_POOLINGS` or any token pooling), else ``ValueError``."""
    canonical = name.replace("-", "_")
    if canonical in TURN_POOLINGS:
        return canonical
    try:
        return validate_pooling(name)
    except ValueError:
        raise ValueError(f"unknown turn pooling {name!r}; choose one of {', '.join(TURN_POOLINGS)} "
                         "or a token pooling") from None


def turn_pooled_dim(dim: int, turn_pooling: str) -> int:
    """Width after aggregating ``dim``-wide turn vectors with ``turn_pooling``."""
    name = validate_turn_pooling(turn_pooling)
    return dim if name == "attention" else pooled_dim(dim, _TURN_ALIASES.get(name, name))


def attention_pool(vectors: torch.Tensor, temperature: float = ATTENTION_TEMPERATURE) -> torch.Tensor:
    """``sum_i softmax(cos(v_i, v_last) / temperature)_i · v_i`` over ``vectors`` ``(N, D)``."""
    vectors = vectors.float()
    query = vectors[-1]
    cos = torch.nn.functional.cosine_similarity(vectors, query.unsqueeze(0), dim=-1, eps=1e-8)
    weights = torch.softmax(cos / temperature, dim=0)
    return (weights.unsqueeze(-1) * vectors).sum(dim=0)


def pool_sequence(vectors: torch.Tensor, pooling: str) -> torch.Tensor:
    """Aggregate a sequence of vectors ``(N, D)`` (e.g. one per assistant turn) into one ``(D')``
    with a turn pooling (:func:`validate_turn_pooling`)."""
    if vectors.dim() != 2 or vectors.shape[0] == 0:
        raise ValueError(f"expected a non-empty (N, D) sequence of turn vectors, got {tuple(vectors.shape)}")
    name = validate_turn_pooling(pooling)
    if name == "attention":
        return attention_pool(vectors)
    mask = torch.ones(1, vectors.shape[0], dtype=torch.long, device=vectors.device)
    return pool(vectors.unsqueeze(0), mask, _TURN_ALIASES.get(name, name))[0]
