"""Leader election: exactly one daemon drives a run; others wait as standbys (or refuse).

Two implementations:

* :class:`AdvisoryLease` (PostgreSQL): ``pg_try_advisory_lock`` on a **dedicated, unpooled**
  connection. The lock lives exactly as long as that connection: a crashed or killed leader's
  connection closes and the lock is free at once. (A pooled connection would keep the lock after
  ``close()`` — it only goes back to the pool.)
* :class:`RowLease` (any database, the SQLite default): a lease row in ``daemon_state`` taken by one
  conditional ``UPDATE`` and renewed every heartbeat; a leader that stops renewing loses it after
  ``ttl_s``.

Both write the leader's id into ``daemon_state`` for ``propel status``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import uuid
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import make_url, or_, update

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, utcnow


def new_leader_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class LeaderLease(Protocol):
    leader_id: str

    def try_acquire(self) -> bool:
        """Take the lease if free; True when this process now leads."""
        ...

    def renew(self) -> bool:
        """Keep the lease alive; False means leadership was lost and work must stop."""
        ...

    def release(self) -> None:
        ...


class RowLease:
    """A lease row with an expiry (works on SQLite and PostgreSQL)."""

    def __init__(self, store: Store, run_id: int, ttl_s: float = 30.0, leader_id: str | None = None) -> None:
        self.store, self.run_id, self.ttl_s = store, run_id, ttl_s
        self.leader_id = leader_id or new_leader_id()
        with store.session() as s:
            repo.load_state(s, run_id)

    def try_acquire(self) -> bool:
        now = utcnow()
        stmt = (update(DaemonState)
                .where(DaemonState.run_id == self.run_id,
                       or_(DaemonState.leader_id.is_(None), DaemonState.leader_id == self.leader_id,
                           DaemonState.lease_until < now))
                .values(leader_id=self.leader_id, lease_until=now + timedelta(seconds=self.ttl_s))
                .returning(DaemonState.id))
        with self.store.session() as s:
            return s.execute(stmt).first() is not None

    def renew(self) -> bool:
        return self.try_acquire()

    def release(self) -> None:
        with self.store.session() as s:
            s.execute(update(DaemonState).where(DaemonState.run_id == self.run_id,
                                                DaemonState.leader_id == self.leader_id)
                      .values(leader_id=None, lease_until=None))


def advisory_key(run_name: str) -> int:
    """A stable signed 64-bit lock key for a run name."""
    return int.from_bytes(hashlib.sha256(f"propel:{run_name}".encode()).digest()[:8], "big", signed=True)


class AdvisoryLease:
    """PostgreSQL session-level advisory lock held on its own connection."""

    def __init__(self, store: Store, run_id: int, run_name: str, leader_id: str | None = None) -> None:
        if store.dialect != "postgresql":
            raise ValueError("advisory locks need PostgreSQL; use RowLease on SQLite")
        self.store, self.run_id = store, run_id
        self.key = advisory_key(run_name)
        self.leader_id = leader_id or new_leader_id()
        self._conn: Any = None
        self._lock = threading.Lock()
        url = make_url(store.url).set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)

    def try_acquire(self) -> bool:
        import psycopg

        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._conninfo, autocommit=True,
                                             application_name=f"propel-leader-{self.leader_id}"[:63])
            got = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0])
        if got:
            self._mark(self.leader_id)
        return got

    def renew(self) -> bool:
        """Still leading while the dedicated connection is alive and holds the lock."""
        import psycopg

        with self._lock:
            if self._conn is None or self._conn.closed:
                return False
            try:
                row = self._conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                    "AND objid = (%s::bigint & 4294967295)::oid AND granted", (self.key,)).fetchone()
            except psycopg.Error:
                return False
        return bool(row and row[0])

    def release(self) -> None:
        """Unlock and close; a dead connection has released the lock already."""
        import psycopg

        with self._lock:
            if self._conn is not None and not self._conn.closed:
                try:
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
                except psycopg.Error:
                    pass  # the server side is gone, and with it the lock
                finally:
                    self._conn.close()
            self._conn = None
        self._mark(None)

    def _mark(self, leader: str | None) -> None:
        with self.store.session() as s:
            repo.load_state(s, self.run_id)
            s.execute(update(DaemonState).where(DaemonState.run_id == self.run_id).values(leader_id=leader))


def make_lease(store: Store, run_id: int, run_name: str, ttl_s: float = 30.0) -> LeaderLease:
    """Advisory lock on PostgreSQL, lease row elsewhere."""
    if store.dialect == "postgresql":
        return AdvisoryLease(store, run_id, run_name)
    return RowLease(store, run_id, ttl_s)
