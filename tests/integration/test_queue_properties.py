"""Property tests of the lease rules against the real store (SQLite and PostgreSQL).

Hypothesis drives random interleavings of lease, renew, ack, nack, clock advances and dead-letter
sweeps by several consumers, with a simulated clock (every call gets ``now``). A small model of
the documented rule (see ``curriculum/store/queue.py``) predicts each answer; after every step the
stored rows must match the model, and:

* never two live leases on one task (a lease is handed out only when every other holder's lease
  has passed ``lease_until``);
* never two outcomes for one task (at most one accepted ack, and the stored outcome is that one);
* never a lost task (every task is ready, leased, acked or dead; after the run, draining the queue
  leaves each one acked or dead).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import select

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import QueueItem
from curriculum.store.queue import AckStatus

pytestmark = pytest.mark.integration

TASKS = 6
CONSUMERS = 3
MAX_ATTEMPTS = 3
T0 = datetime(2030, 1, 1, tzinfo=UTC)
_runs = itertools.count()


@dataclass
class Row:
    """The model of one queue row."""

    state: str = "ready"
    token: str | None = None
    until: datetime | None = None
    attempts: int = 0


@dataclass
class Model:
    rows: dict[int, Row] = field(default_factory=dict)

    def status(self, task_id: int, token: str, now: datetime) -> AckStatus:
        """The documented rule: the token is valid while the row is leased under it."""
        row = self.rows.get(task_id)
        if row is None:
            return AckStatus.NOT_FOUND
        if row.state == "leased" and row.token == token:
            assert row.until is not None
            return AckStatus.LATE if row.until < now else AckStatus.ACKED
        if row.state == "acked":  # only the token that acked retries idempotently (#37.8)
            return AckStatus.ALREADY_ACKED if row.token == token else AckStatus.LEASE_LOST
        return AckStatus.LEASE_LOST if row.state == "leased" else AckStatus.NOT_LEASED

    def visible(self, now: datetime) -> list[int]:
        return [t for t, r in sorted(self.rows.items())
                if r.state == "ready" or (r.state == "leased" and r.until is not None and r.until < now)]


def machine(store: Store) -> type[RuleBasedStateMachine]:
    class QueueMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            name = f"prop-{next(_runs)}"
            with store.session() as s:
                self.run_id = repo.get_or_create_run(s, name, "h", {})
                ids = repo.add_tasks(s, self.run_id, [repo.NewTask("arith", f"{name}-{i}", f"{i}", True, {})
                                                      for i in range(TASKS)])
                queue.enqueue(s, [(t, self.run_id, "t", {"id": t}) for t in ids])
            self.ids = ids
            self.now = T0
            self.model = Model({t: Row() for t in ids})
            # what each consumer believes it holds: task → (token, lease_until)
            self.held: list[dict[int, tuple[str, datetime]]] = [{} for _ in range(CONSUMERS)]
            self.outcomes: dict[int, list[int]] = {t: [] for t in ids}

        def _token(self, consumer: int, task: int) -> str:
            held = self.held[consumer].get(self.ids[task])
            return held[0] if held else f"forged-{consumer}-{task}"

        @rule(consumer=st.integers(0, CONSUMERS - 1), n=st.integers(1, 3), lease_s=st.integers(1, 30))
        def lease(self, consumer: int, n: int, lease_s: int) -> None:
            with store.session() as s:
                got = queue.lease(s, n, lease_s, f"c{consumer}", MAX_ATTEMPTS, run_id=self.run_id, now=self.now)
            expected: list[int] = []
            for t in self.model.visible(self.now):
                if len(expected) == n:
                    break
                row = self.model.rows[t]
                if row.attempts >= MAX_ATTEMPTS:
                    row.state, row.token = "dead", None
                    continue
                expected.append(t)
            assert [x.task_id for x in got] == expected
            for x in got:
                for other, held in enumerate(self.held):  # never two live leases on one task
                    if other != consumer and x.task_id in held:
                        assert held[x.task_id][1] < self.now, f"task {x.task_id} handed out under a live lease"
                row = self.model.rows[x.task_id]
                row.state, row.token, row.until = "leased", x.lease_token, x.lease_until
                row.attempts += 1
                assert x.attempts == row.attempts
                self.held[consumer][x.task_id] = (x.lease_token, x.lease_until)

        @rule(consumer=st.integers(0, CONSUMERS - 1), task=st.integers(0, TASKS - 1), solved=st.integers(0, 8))
        def ack(self, consumer: int, task: int, solved: int) -> None:
            tid, token = self.ids[task], self._token(consumer, task)
            want = self.model.status(tid, token, self.now)
            with store.session() as s:
                got = queue.ack(s, tid, run_id=self.run_id, lease_token=token, solved=solved, n=8,
                                solver=f"c{consumer}", now=self.now)
            assert got == want
            if got.accepted:
                self.model.rows[tid].state = "acked"  # the row keeps the token that acked it
                self.outcomes[tid].append(solved)
            self.held[consumer].pop(tid, None)

        @rule(consumer=st.integers(0, CONSUMERS - 1), task=st.integers(0, TASKS - 1), tried=st.booleans())
        def nack(self, consumer: int, task: int, tried: bool) -> None:
            tid, token = self.ids[task], self._token(consumer, task)
            want = self.model.status(tid, token, self.now)
            with store.session() as s:
                got = queue.nack(s, tid, run_id=self.run_id, lease_token=token, max_attempts=MAX_ATTEMPTS,
                                 tried=tried, now=self.now)
            assert got == want
            if got.accepted:
                row = self.model.rows[tid]
                if not tried:  # an untried nack gives the delivery attempt back (#36.4)
                    row.attempts = max(row.attempts - 1, 0)
                row.state, row.token = ("dead" if row.attempts >= MAX_ATTEMPTS else "ready"), None
            self.held[consumer].pop(tid, None)

        @rule(consumer=st.integers(0, CONSUMERS - 1), task=st.integers(0, TASKS - 1), lease_s=st.integers(1, 30))
        def renew(self, consumer: int, task: int, lease_s: int) -> None:
            tid, token = self.ids[task], self._token(consumer, task)
            want = self.model.status(tid, token, self.now)
            with store.session() as s:
                got = queue.renew(s, tid, run_id=self.run_id, lease_token=token, lease_s=lease_s, now=self.now)
            assert got == want
            if got.accepted:
                until = self.now + timedelta(seconds=lease_s)
                self.model.rows[tid].until = until
                self.held[consumer][tid] = (token, until)
            else:
                self.held[consumer].pop(tid, None)

        @rule(seconds=st.sampled_from([0, 1, 5, 15, 31]))
        def advance(self, seconds: int) -> None:
            self.now += timedelta(seconds=seconds)

        @rule()
        def sweep(self) -> None:
            with store.session() as s:
                queue.dead_letter_expired(s, MAX_ATTEMPTS, run_id=self.run_id, now=self.now)
            for row in self.model.rows.values():
                if row.state == "leased" and row.until is not None and row.until < self.now \
                        and row.attempts >= MAX_ATTEMPTS:
                    row.state, row.token = "dead", None

        @invariant()
        def store_matches_model(self) -> None:
            with store.session() as s:
                rows = s.scalars(select(QueueItem).where(QueueItem.run_id == self.run_id)).all()
            assert {r.task_id: (r.state, r.attempts) for r in rows} == {
                t: (m.state, m.attempts) for t, m in self.model.rows.items()}  # nothing lost, nothing extra
            for r in rows:
                assert len(self.outcomes[r.task_id]) <= 1  # never two outcomes
                if r.state == "acked":
                    assert [r.outcome_solved] == self.outcomes[r.task_id]

        def teardown(self) -> None:
            """Drain: once every lease has expired, each task is delivered again until acked or dead."""
            self.now += timedelta(days=1)
            for _ in range(TASKS * MAX_ATTEMPTS):
                with store.session() as s:
                    got = queue.lease(s, TASKS, 60, "drain", MAX_ATTEMPTS, run_id=self.run_id, now=self.now)
                    if not got:
                        break
                    statuses = queue.ack_many(s, [queue.Outcome(x.task_id, x.lease_token, 0, 1, "drain")
                                                  for x in got], run_id=self.run_id, now=self.now)
                    assert set(statuses.values()) == {AckStatus.ACKED}
            with store.session() as s:
                assert set(repo.queue_depths(s, self.run_id)) <= {"acked", "dead"}

    return QueueMachine


def test_lease_rules_hold_under_random_interleavings(store: Store) -> None:
    run_state_machine_as_test(machine(store), settings=settings(
        max_examples=40 if store.dialect == "sqlite" else 25, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow], database=None))
