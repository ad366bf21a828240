"""Seeded, replayable fault schedules for the whole trainer path (#37): a trainer (``TaskStream`` or
``AsyncTaskStream`` over ``AsyncPropelClient``) against the real API app on PostgreSQL, while the
schedule restarts the API, expires leases during a slow step (another consumer takes the tasks),
mixes bad reports with good ones, reports under a version that was never announced, rotates the
API token, piles up more than 1,000 acks in an outage, or replays the same tasks in a second run.

:func:`make_schedule` is a pure function of the seed; :func:`run_schedule` plays it and returns
what happened (:class:`Played`); the test checks the invariant on it. Timing (how long an outage
lasts against the trainer's steps) is the only thing a replay does not repeat exactly.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.aio import AsyncPropelClient, AsyncTaskStream
from propel_sdk.client import PropelClient, PropelClientError
from propel_sdk.ledger import CloseSummary, Ledger
from propel_sdk.torch_data import TaskStream
from testkit.servers import RestartableServer, ServeProcess, wait_http

FAULTS = ("restart", "expiry", "bad_report", "unannounced", "rotation", "outage_1000", "replay")
SOLVER, THIEF, N = "pol", "thief", 4


@dataclass(frozen=True)
class Schedule:
    seed: int
    client: str  # "sync" (TaskStream) or "async" (AsyncTaskStream + AsyncPropelClient)
    n_tasks: int
    batch: int
    ack_every: int
    events: dict[int, tuple[str, ...]]  # trainer step -> faults fired before that step's report
    bad_steps: frozenset[int]
    replay: bool  # a second run replays the same tasks (its own trainer, the same solver version)
    outage_1000: bool  # every report made while the API is down: > 1,000 acks pile up

    @property
    def faults(self) -> set[str]:
        found = {f for evs in self.events.values() for f in evs}
        return found | ({"bad_report"} if self.bad_steps else set()) | ({"replay"} if self.replay else set()) | (
            {"outage_1000"} if self.outage_1000 else set())


def make_schedule(seed: int) -> Schedule:
    """The schedule of ``seed``: 2-4 of the step faults (one forced by ``seed % 5``, so every kind
    occurs across 20 seeds), a replay run for about a third, the >1,000-acks outage for seeds ≡ 7 mod 10."""
    rng = random.Random(seed)
    outage = seed % 10 == 7
    n = 1100 if outage else rng.randint(24, 40)
    kinds = ["restart", "expiry", "bad_report", "unannounced", "rotation"]
    chosen = {kinds[seed % 5], *rng.sample(kinds, rng.randint(1, 3))}
    while len(chosen) < 2:
        chosen.add(rng.choice(kinds))
    if outage:  # the API stays down from the first report to the last: no restart, no thief meanwhile
        chosen -= {"restart", "expiry"}
    events: dict[int, tuple[str, ...]] = {}
    steps = list(range(2, min(n, 40) - 2))
    quiet: set[int] = set()  # around the expiry, every report is good: a stolen task's report must be valid
    for kind in sorted(chosen - {"bad_report"}, key=lambda k: k != "expiry"):
        step = rng.choice([s for s in steps if kind != "unannounced" or s not in quiet])
        if kind == "expiry":
            quiet = set(range(step - 3, step + 3))
        events[step] = (*events.get(step, ()), kind)
    bad = frozenset(rng.sample([s for s in range(n) if s not in quiet], rng.randint(1, 3))) if (
        "bad_report" in chosen) else frozenset()
    client = "async" if (seed + seed // 10) % 2 else "sync"  # 10 each; the two outage seeds one each
    return Schedule(seed, client, n, 1000 if outage else rng.choice([4, 8, 16]),
                    rng.choice([4, 8, 16, 32]), events, bad, rng.random() < 0.35 and not outage, outage)


@dataclass
class Report:
    solved: int
    n: int
    errors: int
    solver_id: str


@dataclass
class Played:
    """What one run's trainer reported and was told, and what the thief acked."""

    run: str
    reports: dict[int, Report] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # task -> refusal status, as surfaced to the trainer
    thief: dict[int, Report] = field(default_factory=dict)
    expected_refusals: set[int] = field(default_factory=set)  # bad reports and unannounced-version reports
    piled_up: int = 0  # the most outcomes pending at once (the outage schedule: all of them)
    summary: CloseSummary | None = None


class Rig:
    """The API servers (one per run) on one PostgreSQL store, their token, and the fault actions."""

    def __init__(self, store: Store, seed: int, processes: Path | None = None) -> None:
        """``processes``: a work folder to run each API as a real ``propel serve`` process (restarts kill
        it; a token rotation restarts it); None: the same app in this process (quick)."""
        self.store, self.token = store, "rig-t0k3n-0"
        self.idle_s = 2.0 if processes is None else 20.0  # how long a trainer polls through an outage
        self.runs = (f"faults-{seed}-a", f"faults-{seed}-b")
        self.ctxs: dict[str, ApiContext] = {}
        self.servers: dict[str, RestartableServer | ServeProcess] = {
            run: RestartableServer(self._factory(run)) if processes is None else
            ServeProcess(run, store.url, processes, lambda: self.token) for run in self.runs}

    def _factory(self, run: str) -> Callable[[], object]:
        def make() -> object:  # a fresh context per start: a restarted process forgets its caches
            self.ctxs[run] = ApiContext(store=self.store, run_name=run, token=self.token, max_attempts=5)
            return create_app(self.ctxs[run])
        return make

    def seed(self, n: int, runs: tuple[str, ...], salt: int) -> list[int]:
        with self.store.session() as s:
            run_ids = [repo.get_or_create_run(s, run, "h", {}) for run in runs]
            ids = repo.add_tasks(s, run_ids[0], [repo.NewTask("arith", f"f{salt}-{i}", f"{i}+{salt}", True,
                                                              {"answer": i + salt}) for i in range(n)])
            queue.enqueue(s, [(t, r, "add:1", {"id": t, "schema_version": 1}) for r in run_ids for t in ids])
        return ids

    def restart(self, run: str, down_s: float) -> None:
        """Stop the API and start it again after ``down_s`` (in a thread: the trainer goes on meanwhile)."""
        server = self.servers[run]
        server.stop()
        back = threading.Event()
        threading.Timer(down_s, back.set).start()
        server.start(when=back)

    def rotate(self) -> None:
        self.token = f"rig-t0k3n-{int(self.token.rsplit('-', 1)[1]) + 1}"
        for ctx in self.ctxs.values():
            ctx.token = self.token
        for server in self.servers.values():
            if isinstance(server, ServeProcess) and server.running:  # a process takes its token at start
                server.stop()
                server.start()

    def expire_and_steal(self, run: str, victims: list[int], played: Played) -> None:
        """The trainer froze for longer than its lease: the leases lapse and another consumer takes
        those tasks and acks them at once."""
        with self.store.session() as s:
            run_id = repo.get_or_create_run(s, run, "h", {})
            s.execute(update(QueueItem).where(QueueItem.run_id == run_id, QueueItem.task_id.in_(victims),
                                              QueueItem.state == "leased")
                      .values(lease_until=queue.utcnow() - timedelta(seconds=1)))
        wait_http(f"{self.servers[run].url}/openapi.json", 90)  # a restart may be under way: the thief waits
        with PropelClient(self.servers[run].url, token=self.token, backoff_s=0.05, max_backoff_s=0.3) as thief:
            for task in thief.lease(len(victims), lease_s=60, consumer="thief"):
                if thief.ack(task, solved=1, n=N, solver=THIEF, version="step-1") in ("acked", "late"):
                    played.thief[task.id] = Report(1, N, 0, f"{THIEF}@step-1")

    def rows(self, run: str) -> dict[int, tuple[str, int | None, int | None, str | None]]:
        with self.store.session() as s:
            run_id = repo.get_or_create_run(s, run, "h", {})
            got = s.execute(select(QueueItem.task_id, QueueItem.state, QueueItem.outcome_solved, QueueItem.outcome_n,
                                   QueueItem.outcome_solver).where(QueueItem.run_id == run_id)).all()
        return {tid: (state, solved, n, solver) for tid, state, solved, n, solver in got}

    def labels(self, ids: list[int]) -> list[tuple[int, str, int, int]]:
        with self.store.session() as s:
            got = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k)
                            .where(Label.source == "consumer", Label.task_id.in_(ids))).all()
        return [tuple(x) for x in got]  # type: ignore[misc]


class Trainer:
    """The fault-aware trainer loop both transports share: what to report at each step, which fault
    fires before it; the transport-specific calls are the two subclasses' (sync, async)."""

    def __init__(self, rig: Rig, sched: Schedule, run: str, salt: int) -> None:
        self.rig, self.sched, self.run, self.salt = rig, sched, run, salt
        self.played = Played(run)
        self.step = 0
        self.unannounced_until = -1

    def read_ahead_all(self) -> bool:
        """The outage schedule leases every task before the API goes down (so > 1,000 acks pile up)."""
        return self.sched.outage_1000 and self.step == 0

    def outcome(self, tid: int) -> tuple[int, int, int]:
        if self.step in self.sched.bad_steps:
            return N, N, 1  # solved + errors > n: refused
        return (tid * 7 + self.salt) % (N + 1), N, 0

    def before_report(self, ledger: Ledger, current: int) -> None:
        """Fire this step's faults (the replay run gets none: it is the plain second trainer)."""
        if self.salt:
            return
        for fault in self.sched.events.get(self.step, ()):
            if fault == "restart":
                self.rig.restart(self.run, down_s=0.3)
            elif fault == "rotation":
                self.rig.rotate()
            elif fault == "unannounced":
                # no digit (so no step number) and never announced: the server cannot order it
                ledger.version = "nightly-" + "".join(chr(97 + int(d)) for d in str(self.sched.seed))
                self.unannounced_until = self.step + 3
            elif fault == "expiry":
                # the task in hand (reported right after), the next one read ahead, the oldest waiting report
                ahead = [t for t, h in ledger.held.items() if not h.handed][:1]
                victims = [current, *ahead, *sorted(ledger.pending)[:1]]
                self.rig.expire_and_steal(self.run, victims, self.played)
        if self.step == self.unannounced_until:
            ledger.version = "step-2"
        if self.sched.outage_1000 and self.step == 0:
            self.rig.servers[self.run].stop()

    def record(self, ledger: Ledger, tid: int, accepted: bool) -> None:
        self.played.piled_up = max(self.played.piled_up, len(ledger.pending))
        solved, n, errors = self.outcome(tid)
        if accepted:
            self.played.reports[tid] = Report(solved, n, errors, f"{SOLVER}@{ledger.version}")
            if errors or str(ledger.version).startswith("nightly"):
                self.played.expected_refusals.add(tid)
        self.step += 1

    def after_stream(self, summary: CloseSummary) -> None:
        self.played.summary = summary
        self.played.refused = {r.task_id: r.status for r in summary.refused}


def _is_401(err: PropelClientError) -> bool:
    return err.status == 401


def _client_kw(sched: Schedule) -> dict[str, Any]:
    # the outage schedule fails each flush at once (no retry waits): 1,100 reports in an outage stay quick
    return {"max_retries": 0 if sched.outage_1000 else 2, "backoff_s": 0.05, "max_backoff_s": 0.2}


def play_sync(rig: Rig, sched: Schedule, run: str, salt: int) -> Played:
    tr = Trainer(rig, sched, run, salt)
    client = PropelClient(rig.servers[run].url, token=rig.token, **_client_kw(sched))
    stream = TaskStream(client, solver=SOLVER, version="step-1", batch=sched.batch, ack_every=sched.ack_every,
                        lease_s=30.0, idle_timeout_s=rig.idle_s, poll_s=0.05, max_tasks=sched.n_tasks,
                        row=lambda t: {"task_id": t.id})
    rows = iter(stream)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except PropelClientError as err:  # a lease after the token rotation: the trainer takes the new token
            if not _is_401(err):
                raise
            client.set_token(rig.token)
            rows = iter(stream)
            continue
        if tr.read_ahead_all():
            client.run(stream.ledger.lease(sched.n_tasks - stream.ledger.leased, "torch-trainer", {}))
        tid = row["task_id"]
        tr.before_report(stream.ledger, tid)
        try:
            tr.record(stream.ledger, tid, stream.report(tid, *tr.outcome(tid)))
        except PropelClientError as err:  # the report is recorded; its flush met the rotated token
            if not _is_401(err):
                raise
            tr.record(stream.ledger, tid, True)
            client.set_token(rig.token)
    if sched.outage_1000:
        rig.servers[run].start()
    _flush_through_rotation(lambda: stream.flush(), lambda: client.set_token(rig.token))
    tr.after_stream(stream.close())
    client.close()
    return tr.played


def _flush_through_rotation(flush: Callable[[], Any], retoken: Callable[[], None]) -> None:
    for _ in range(3):
        try:
            if flush():
                return
        except PropelClientError as err:
            if not _is_401(err):
                raise
            retoken()


async def _play_async(rig: Rig, sched: Schedule, run: str, salt: int) -> Played:
    tr = Trainer(rig, sched, run, salt)
    async with AsyncPropelClient(rig.servers[run].url, token=rig.token, **_client_kw(sched)) as client:
        stream = AsyncTaskStream(client, solver=SOLVER, version="step-1", batch=sched.batch,
                                 ack_every=sched.ack_every, lease_s=30.0, max_tasks=sched.n_tasks,
                                 poll_s=0.05, idle_timeout_s=rig.idle_s)
        while True:
            try:
                async for task in stream:
                    if tr.read_ahead_all():
                        await client.run(stream.ledger.lease(sched.n_tasks - stream.ledger.leased, "async", {}))
                    tr.before_report(stream.ledger, task.id)
                    try:
                        tr.record(stream.ledger, task.id, await stream.report(task.id, *tr.outcome(task.id)))
                    except PropelClientError as err:  # recorded; its flush met the rotated token
                        if not _is_401(err):
                            raise
                        tr.record(stream.ledger, task.id, True)
                        client.set_token(rig.token)
                break
            except PropelClientError as err:  # a lease after the token rotation
                if not _is_401(err):
                    raise
                client.set_token(rig.token)
        if sched.outage_1000:
            rig.servers[run].start()
        for _ in range(3):
            try:
                if await stream.flush():
                    break
            except PropelClientError as err:
                if not _is_401(err):
                    raise
                client.set_token(rig.token)
        tr.after_stream(await stream.close())
    return tr.played


def run_schedule(rig: Rig, sched: Schedule) -> tuple[list[int], list[Played]]:
    """Seed the tasks, play the schedule's trainer (and the replay run's), return the ids and what each run saw."""
    runs = rig.runs if sched.replay else rig.runs[:1]
    ids = rig.seed(sched.n_tasks, runs, salt=sched.seed)
    for run in runs:
        rig.servers[run].start()
    played = []
    try:
        for salt, run in enumerate(runs):
            if sched.client == "sync":
                played.append(play_sync(rig, sched, run, salt))
            else:
                played.append(asyncio.run(_play_async(rig, sched, run, salt)))
    finally:
        for run in runs:
            rig.servers[run].stop()
    return ids, played
