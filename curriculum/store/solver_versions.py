"""Solver versions: a solver is a *name* plus an *ordered version*.

A trainer's solver improves checkpoint after checkpoint; labels measured against one version go
stale as later versions arrive. Every trial and label records ``solver_name`` and
``solver_version``; the ``solver_versions`` table holds, per name, each version with its *order*
(an integer: a checkpoint step, or an explicit order given when the version is announced).

* The **current** version of a name is the one with the highest order (first registered on a tie).
  A version registered later with a lower order (a late outcome of an older checkpoint) is kept but
  never becomes current.
* A version string that is an integer, or letters plus an integer (``1200``, ``step-1200``,
  ``v3``, ``ckpt_500``), orders by that integer; any other string (``v1.2.10``) needs an explicit
  order — guessing would order semantic versions wrongly.
* ``""`` is the *unversioned* version (order ``-1``): rows written before versions existed and a
  solver whose config names no version. Any announced version (order ≥ 0) supersedes it.
* The stored ``solver_id`` of a trial or label is the *qualified* id ``name@version`` (just ``name``
  when unversioned), so the existing natural keys — trials per (task, solver, attempt), labels per
  (task, solver, source) — already separate versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from curriculum.store.db import insert_ignore
from curriculum.store.models import SolverVersionRow, utcnow

UNVERSIONED = ""
UNVERSIONED_ORDER = -1
MAX_ORDER = 2**53  # JSON-safe integers; a checkpoint step never gets near
_DERIVABLE = re.compile(r"^(?:[A-Za-z]+[-_]?)?(\d{1,15})$")
VERSION_SOURCES = ("announce", "ack", "spotcheck", "config", "migration")
#: Longest qualified id ``name@version`` the store keeps (the ``solver_id`` / ``outcome_solver`` columns).
SOLVER_ID_MAX = 256


class VersionError(ValueError):
    """A version that cannot be registered (the message names the field and the fix)."""


@dataclass(frozen=True)
class SolverVersion:
    name: str
    version: str
    order: int | None  # None: an unordered legacy version (never current)
    source: str
    created_at: datetime

    @property
    def qualified_id(self) -> str:
        return qualified_id(self.name, self.version)


@dataclass(frozen=True)
class Registered:
    """The outcome of registering a version: whether it is new, and the name's current version."""

    version: SolverVersion
    created: bool
    current: SolverVersion

    @property
    def is_current(self) -> bool:
        return self.current.version == self.version.version


def qualified_id(name: str, version: str) -> str:
    """The ``solver_id`` stored with trials and labels: ``name@version`` (``name`` when unversioned)."""
    return name if version == UNVERSIONED else f"{name}@{version}"


def solver_id_problem(name: str, version: str) -> str | None:
    """Why ``name@version`` cannot be stored (one line naming the limit and the fix), or None."""
    qid = qualified_id(name, version)
    if len(qid) <= SOLVER_ID_MAX:
        return None
    return (f"solver id {qid[:40]!r}… is {len(qid)} characters (name {len(name)} + '@' + version {len(version)}); "
            f"the store keeps at most {SOLVER_ID_MAX}: shorten the solver name or the version")


def split_solver_id(solver_id: str) -> tuple[str, str]:
    """``policy@step-1200`` → (``policy``, ``step-1200``); an id without ``@`` is unversioned."""
    name, sep, version = solver_id.rpartition("@")
    if not sep or not name:
        return solver_id, UNVERSIONED
    return name, version


def derive_order(version: str) -> int | None:
    """The order a version string implies (see the module doc), or None when it implies none."""
    if version == UNVERSIONED:
        return UNVERSIONED_ORDER
    match = _DERIVABLE.match(version)
    return int(match.group(1)) if match else None


def resolve_order(version: str, order: int | None) -> int:
    """The order to register ``version`` with: the explicit one, else the derived one."""
    if order is not None:
        if not 0 <= order <= MAX_ORDER:
            raise VersionError(f"order must be between 0 and {MAX_ORDER}, got {order}")
        if version == UNVERSIONED:
            raise VersionError("version must not be empty when an order is given")
        return order
    derived = derive_order(version)
    if derived is None:
        raise VersionError(f"version {version!r} carries no step number: give its order explicitly "
                           "(an integer, higher = newer), e.g. `propel solver announce NAME VERSION --order 7`")
    return derived


def _row(r: SolverVersionRow) -> SolverVersion:
    return SolverVersion(r.solver, r.version, r.ordinal, r.source, r.created_at)


def versions(sess: Session, name: str) -> list[SolverVersion]:
    """Every registered version of ``name``, oldest order first (unordered legacy versions first)."""
    rows = sess.scalars(select(SolverVersionRow).where(SolverVersionRow.solver == name))
    return sorted((_row(r) for r in rows), key=lambda v: (v.order is not None, v.order or 0, v.created_at))


def current(sess: Session, name: str) -> SolverVersion | None:
    """The highest-ordered version of ``name`` (None when the name is unknown or only unordered)."""
    ordered = [v for v in versions(sess, name) if v.order is not None]
    if not ordered:
        return None
    top = max(v.order for v in ordered if v.order is not None)
    return min((v for v in ordered if v.order == top), key=lambda v: v.created_at)


def ensure_registered(sess: Session, name: str, version: str, order: int | None = None,
                      source: str = "announce") -> tuple[SolverVersion, bool]:
    """Register ``version`` of ``name`` if new (idempotent: a known version keeps its first order);
    returns it and whether it was new. The hot path of an ack: one indexed read, at most one insert.

    Raises :class:`VersionError` for a new version whose order is neither given nor derivable, or
    when an explicit order contradicts the one the version was first registered with.
    """
    if source not in VERSION_SOURCES:
        raise ValueError(f"version source must be one of {VERSION_SOURCES}, got {source!r}")
    where = (SolverVersionRow.solver == name, SolverVersionRow.version == version)
    known = sess.scalars(select(SolverVersionRow).where(*where)).first()
    created = False
    if known is None:
        ordinal = resolve_order(version, order)
        created = insert_ignore(sess, SolverVersionRow, [{
            "solver": name, "version": version, "ordinal": ordinal, "source": source,
            "created_at": utcnow()}], ["solver", "version"]) == 1
        known = sess.scalars(select(SolverVersionRow).where(*where)).one()
        if not created:  # a concurrent first registration won: its order stands
            _check_order(name, version, known.ordinal, order)
    else:
        _check_order(name, version, known.ordinal, order)
    return _row(known), created


VersionKey = tuple[str, str, int | None]  # solver name, version, the order an ack or announce gave (None: none)


def sorted_keys(keys: Iterable[VersionKey]) -> list[VersionKey]:
    """The distinct keys in the order they are registered (name, version, order; no order first): two
    transactions registering the same new versions then wait for each other instead of deadlocking."""
    return sorted(set(keys), key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]))


def check_registrations(sess: Session, keys: Sequence[VersionKey]) -> dict[VersionKey, str]:
    """Read-only: why each ``(name, version, order)`` that :func:`ensure_registered` would refuse is refused,
    taking the keys in sorted order with the earlier ones counted as registered (what registering them all
    in that order would do). Writes nothing: an ack checks its versions before the queue decides it and
    registers them only once it is accepted."""
    planned: dict[tuple[str, str], int | None] = {}
    bad: dict[VersionKey, str] = {}
    for key in sorted_keys(keys):
        name, version, order = key
        try:
            if (name, version) not in planned:
                known = sess.scalars(select(SolverVersionRow).where(
                    SolverVersionRow.solver == name, SolverVersionRow.version == version)).first()
                planned[(name, version)] = resolve_order(version, order) if known is None else known.ordinal
            _check_order(name, version, planned[(name, version)], order)
        except VersionError as err:
            bad[key] = str(err)
    return bad


def _check_order(name: str, version: str, ordinal: int | None, order: int | None) -> None:
    if order is not None and ordinal is not None and order != ordinal:
        raise VersionError(f"version {version!r} of {name!r} was registered with order "
                           f"{ordinal}; order {order} contradicts it (a version's order never changes: "
                           "send that order, or none)")


def register(sess: Session, name: str, version: str, order: int | None = None,
             source: str = "announce") -> Registered:
    """:func:`ensure_registered`, plus the name's current version (what an announce answers)."""
    got, created = ensure_registered(sess, name, version, order, source)
    top = current(sess, name)
    return Registered(got, created, top if top is not None else got)


def ages(all_versions: Sequence[SolverVersion]) -> dict[str, int | None]:
    """How many versions old each version is: 0 for the current one, 1 for the one before, …

    Age counts the *distinct orders* above a version, so a late-registered older checkpoint ages
    like its place in the order, not like its arrival. Unordered legacy versions have no age (None).
    The unversioned ``""`` always has an age (older than every ordered version) — registered or not:
    trials of a solver whose config names no version are written before any announce.
    """
    orders = sorted({v.order for v in all_versions if v.order is not None} | {UNVERSIONED_ORDER}, reverse=True)
    rank = {o: i for i, o in enumerate(orders)}
    out = {v.version: (rank[v.order] if v.order is not None else None) for v in all_versions}
    out.setdefault(UNVERSIONED, rank[UNVERSIONED_ORDER])
    return out
