"""Which solver this daemon follows, and the lines that say so where a trainer looks (issue #36).

A daemon follows one solver (:mod:`curriculum.frontier.followed`): the configured one (``solver.follow =
"config"``) or the first solver a trainer announced or acked (``"first_trainer"``, the default of the
embedded synthetic run). Probes, drift and emission are about that solver; outcomes of any other solver
are stored as labels but steer nothing. The announce answer, ``/v1/status``, ``propel status`` and one
log line per name and process say which solver is followed, why, and the setting that changes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.frontier.followed import TRAINER_SOURCES, Followed, FollowMode, follows_line, resolve
from curriculum.store.models import SolverVersionRow

log = logging.getLogger("propel.api")


def notice(name: str, followed: Followed | None) -> str | None:
    """The line for a solver this daemon does not follow (None when it does, or when unknown)."""
    if followed is None or name == followed.name:
        return None
    it = repr(followed.name)
    return (f"solver {name!r} is not followed: this daemon follows {it} ({followed.why}). Its acks are stored "
            f"as labels, but probes, drift and emitted tasks target {it}. To follow it, set "
            f'solver.follow = "config" and solver.name = "{name}" in the config and restart the daemon')


class NoticeLog:
    """Logs :func:`notice` once per solver name (and process). The line naming the followed solver is the
    driver's, logged once when it starts following it (:func:`daemon.loop.follow.switch`)."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def once(self, names: Iterable[str], followed: Followed | None) -> None:
        for name in names:
            line = notice(name, followed)
            if line is None:
                continue
            with self._lock:
                if name in self._said:
                    continue
                self._said.add(name)
            log.warning(line)


def trainer_names(sess: Session) -> list[str]:
    """Every solver name a trainer announced or acked, sorted."""
    q = select(SolverVersionRow.solver).where(SolverVersionRow.source.in_(TRAINER_SOURCES)).distinct()
    return sorted(sess.scalars(q))


def resolve_followed(sess: Session, configured: tuple[str, ...], mode: FollowMode) -> Followed | None:
    """The followed solver (None when this process cannot name its configured solver: say nothing)."""
    return resolve(sess, configured[0], mode) if configured else None


def following(sess: Session, followed: Followed | None) -> dict[str, Any]:
    """What ``/v1/status`` and ``propel status`` report: the followed name, why, whether it is a trainer's,
    and once per trainer name that is not followed, the notice (empty when this process does not know
    what it follows)."""
    if followed is None:
        return {"followed": [], "not_followed": []}
    not_followed = [{"solver": n, "notice": line} for n in trainer_names(sess)
                    if (line := notice(n, followed)) is not None]
    return {"followed": [followed.name], "why": followed.why, "trainer": followed.trainer,
            "line": follows_line(followed), "not_followed": not_followed}
