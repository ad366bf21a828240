"""Trainer-side selection of leased tasks: a mixture over domains or topics, a range of predicted
in-band probability, one solver.

A mixture ``{"arith": 0.7, "math": 0.3}`` splits a lease of ``n`` tasks by drawing each task's
key with those weights (a multinomial draw, so small batches follow the weights on average
rather than always rounding the same way); each key's share is one ``SKIP LOCKED`` lease over
the ``ix_queue_open_run_domain`` / ``_topic`` index. When a key has fewer tasks ready than its
share, the shortfall is filled from the other named keys (never from unnamed ones), so a lease
returns fewer than ``n`` tasks only when the named keys together run dry.

Names are checked against the run's queue: a domain, topic or solver that no task of the run has
ever carried is refused (:func:`unknown_names`), so a typo is an error instead of an empty lease.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from curriculum.store.models import QueueItem
from curriculum.store.queue import Leased, Match, lease

MixtureKey = Literal["domain", "topic"]


@dataclass(frozen=True)
class Selection:
    """What a lease asks for; the empty selection is any ready task of the run."""

    by: MixtureKey | None = None
    weights: Mapping[str, float] = field(default_factory=dict)
    min_predicted: float | None = None
    max_predicted: float | None = None
    solver: str | None = None

    def match(self, keys: Sequence[str] | None = None) -> Match:
        """The rows of mixture ``keys`` (all keys when None) that meet the range and solver."""
        keys = tuple(sorted(self.weights) if keys is None else keys) if self.by is not None else None
        return Match(domains=keys if self.by == "domain" else None, topics=keys if self.by == "topic" else None,
                     min_predicted=self.min_predicted, max_predicted=self.max_predicted, solver=self.solver)


def _column(by: MixtureKey) -> ColumnElement[str | None]:
    return QueueItem.domain if by == "domain" else QueueItem.topic  # type: ignore[return-value]


def quotas(n: int, weights: Mapping[str, float], rng: random.Random) -> dict[str, int]:
    """Split ``n`` over the keys by a multinomial draw with ``weights`` (positive, any scale)."""
    keys = sorted(weights)
    counts = dict.fromkeys(keys, 0)
    for key in rng.choices(keys, weights=[weights[k] for k in keys], k=n):
        counts[key] += 1
    return counts


def unknown_names(sess: Session, run_id: int, sel: Selection,
                  known: set[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """``(kind, name)`` for each domain, topic or solver named by ``sel`` that no queue row of the
    run carries. ``known`` caches names found before (a name, once present, stays known)."""
    known = set() if known is None else known
    asked: list[tuple[str, ColumnElement[str | None], list[str]]] = []
    if sel.by is not None and sel.weights:
        asked.append((sel.by, _column(sel.by), sorted(sel.weights)))
    if sel.solver is not None:
        asked.append(("solver", QueueItem.solver, [sel.solver]))  # type: ignore[arg-type]
    missing = []
    for what, col, names in asked:
        todo = [name for name in names if (what, name) not in known]
        if not todo:
            continue
        found = set(sess.scalars(select(col).where(QueueItem.run_id == run_id, col.in_(todo)).distinct()))
        known.update((what, name) for name in found if name is not None)
        missing += [(what, name) for name in todo if name not in found]
    return missing


def lease_selected(sess: Session, n: int, lease_s: float, consumer: str, max_attempts: int, *, run_id: int,
                   sel: Selection, rng: random.Random | None = None, now: datetime | None = None) -> list[Leased]:
    """Lease up to ``n`` tasks of the run that match ``sel`` (see the module docstring)."""
    if sel.by is None or not sel.weights:
        return lease(sess, n, lease_s, consumer, max_attempts, run_id=run_id, now=now, match=sel.match())
    got: list[Leased] = []
    for key, share in quotas(n, sel.weights, rng or random.Random()).items():
        if share:
            got += lease(sess, share, lease_s, consumer, max_attempts, run_id=run_id, now=now, match=sel.match([key]))
    if len(got) < n:  # a key ran short: fill from the other named keys
        got += lease(sess, n - len(got), lease_s, consumer, max_attempts, run_id=run_id, now=now, match=sel.match())
    return sorted(got, key=lambda x: x.queue_id)
