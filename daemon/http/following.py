"""Which solvers this daemon follows, and the one line that says so when a trainer's is not one of them.

Today a daemon follows one solver: ``solver.name`` (default: its backend's id). Probes, drift and
emission are about that solver; outcomes of any other solver are stored as labels but steer nothing.
A trainer announcing or acking another name learns it where it looks (issue #36): the announce
answer, ``/v1/status``, ``propel status`` and one log line per name and process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.store.models import SolverVersionRow

log = logging.getLogger("propel.api")

#: The sources by which a trainer makes a name known (a daemon's own are ``config`` and ``spotcheck``).
TRAINER_SOURCES = ("announce", "ack")


def notice(name: str, followed: Sequence[str]) -> str | None:
    """The line for a solver this daemon does not follow (None when it does, or when unknown)."""
    if not followed or name in followed:
        return None
    them = ", ".join(repr(f) for f in followed)
    return (f"solver {name!r} is not followed: this daemon follows {them} (solver.name). Its acks are stored "
            f"as labels, but probes, drift and emitted tasks target {them}. To follow it, set "
            f'solver.name = "{name}" in the config and restart the daemon')


class NoticeLog:
    """Logs :func:`notice` once per solver name (and process)."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def once(self, names: Iterable[str], followed: Sequence[str]) -> None:
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


def following(sess: Session, followed: Sequence[str]) -> dict[str, Any]:
    """What ``/v1/status`` and ``propel status`` report: the followed names, and once per trainer
    name that is not followed, the notice (empty when this process does not know what it follows)."""
    not_followed = [{"solver": n, "notice": line} for n in trainer_names(sess)
                    if (line := notice(n, followed)) is not None]
    return {"followed": list(followed), "not_followed": not_followed}
