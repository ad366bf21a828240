"""Which solver a daemon follows, and why (issue #36).

``solver.follow`` picks it:

* ``config`` — the configured solver (``solver.name``, default the backend's id), spot-checked by the daemon;
* ``first_trainer`` — the first solver name a trainer announced or acked. Until one does, the configured
  solver. A trainer's solver has no spot-check endpoint: the daemon knows it only through acks and
  announces (its probes, drift and emission are learned from those, see :mod:`daemon.loop.follow`).

The choice lives in the store: the ``solver_versions`` rows a trainer registered (source ``announce`` or
``ack``) are never deleted, and the first of them (lowest id) stays first, so a restarted daemon, the
API process and ``propel status`` all resolve the same solver without sharing memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.store.models import SolverVersionRow

#: The sources by which a trainer makes a name known (a daemon's own are ``config`` and ``spotcheck``).
TRAINER_SOURCES = ("announce", "ack")

FollowMode = Literal["config", "first_trainer"]
CONFIG_WHY = 'solver.follow = "config": the configured solver (solver.name)'


@dataclass(frozen=True)
class Followed:
    """The followed solver ``name``; ``trainer``: known only through a trainer (no spot-checks);
    ``why``: one line naming the setting that chose it."""

    name: str
    why: str
    trainer: bool = False


def first_trainer(sess: Session) -> str | None:
    """The first solver name a trainer announced or acked (None: none yet)."""
    q = (select(SolverVersionRow.solver).where(SolverVersionRow.source.in_(TRAINER_SOURCES))
         .order_by(SolverVersionRow.id).limit(1))
    return sess.scalars(q).first()


def resolve(sess: Session, configured: str, mode: FollowMode) -> Followed:
    """The solver this daemon follows now (``configured``: ``solver.name`` or the backend's id)."""
    if mode == "config":
        return Followed(configured, CONFIG_WHY)
    first = first_trainer(sess)
    if first is None:
        return Followed(configured, 'solver.follow = "first_trainer": no trainer has announced or acked yet, '
                                    "so the configured solver until one does")
    return Followed(first, 'solver.follow = "first_trainer": the first solver a trainer announced or acked',
                    trainer=first != configured)


def follows_line(followed: Followed) -> str:
    """The one line that says which solver is followed and why."""
    how = "known only through its trainer's acks and announces" if followed.trainer else "spot-checked"
    return f"following solver {followed.name!r} ({how}): {followed.why}"
