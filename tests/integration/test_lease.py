"""Leader election: exactly one leader; a dead leader's lease passes to the standby."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, text, update

from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, utcnow
from daemon.service.lease import AdvisoryLease, RowLease, make_lease

pytestmark = pytest.mark.integration


def _run(store: Store, name: str = "lead") -> int:
    with store.session() as s:
        return repo.get_or_create_run(s, name, "h", {})


def test_row_lease_exclusive_and_expiring(store: Store) -> None:
    run_id = _run(store)
    a, b = RowLease(store, run_id, ttl_s=30), RowLease(store, run_id, ttl_s=30)
    assert a.try_acquire() and not b.try_acquire()
    assert a.renew() and not b.renew()
    with store.session() as s:  # a stops renewing: its lease expires
        s.execute(update(DaemonState).values(lease_until=utcnow() - timedelta(seconds=1)))
    assert b.try_acquire() and not a.renew()
    b.release()
    assert a.try_acquire()


def test_advisory_lease_moves_when_leader_connection_dies(pg_store: Store) -> None:
    run_id = _run(pg_store)
    a = AdvisoryLease(pg_store, run_id, "lead")
    b = AdvisoryLease(pg_store, run_id, "lead")
    other_run = AdvisoryLease(pg_store, _run(pg_store, "other"), "other")
    try:
        assert a.try_acquire() and a.renew()
        assert not b.try_acquire() and not b.renew()
        assert other_run.try_acquire()  # runs do not block each other
        with pg_store.session() as s:
            assert s.scalars(select(DaemonState.leader_id).where(DaemonState.run_id == run_id)).one() == a.leader_id
            # the leader's server process dies (as if the daemon host crashed)
            s.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n"),
                      {"n": f"propel-leader-{a.leader_id}"[:63]})
        assert not a.renew()
        assert b.try_acquire() and b.renew()
    finally:
        for lease in (a, b, other_run):
            lease.release()


def test_make_lease_picks_by_dialect(store: Store) -> None:
    lease = make_lease(store, _run(store), "lead")
    assert isinstance(lease, AdvisoryLease if store.dialect == "postgresql" else RowLease)
